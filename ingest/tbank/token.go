package tbank

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/wire"
)

// Members of a body that the Token treats apart.
const (
	// tokenMember carries the Token; it is not signed itself.
	tokenMember = "Token"
	// passwordMember is where the password goes in the signed fields; a
	// body never carries it.
	passwordMember = "Password"
)

// Token returns the Token of a request or notification body, a JSON
// object, under the terminal password: the values of its top-level
// members that are strings, numbers or booleans (its own Token member
// aside; objects, arrays and nulls are not signed), with the password as
// member Password, concatenated in the byte order of the member names, then
// SHA-256 in lowercase hexadecimal. Each value is signed as it is written
// in the body: a string unescaped, a number as its literal, a boolean as
// true or false. Build a request without its Token, take the Token of that
// body, and send it with the Token added.
//
// It returns an error, quoting nothing of the body, when the body is not
// one JSON object of valid UTF-8, names a top-level member twice, nests
// deeper than wire.MaxDepth, or carries a Password member.
func Token(body, password []byte) (string, error) {
	s, err := scan(body)
	if err != nil {
		return "", err
	}
	sum := s.sum(password)
	return hex.EncodeToString(sum[:]), nil
}

// Verify checks the Token of a notification body against every non-empty
// password (an endpoint has several while its password rotates), comparing
// in constant time. It reads the body only to find the signed values and
// the Token. Errors wrap ingest.ErrSignature and never quote the body, the
// Token or a password.
func Verify(body []byte, passwords [][]byte) error {
	s, err := scan(body)
	switch {
	case err != nil:
		return sigErr("malformed body, the Token cannot be checked: " + err.Error())
	case s.token == nil || *s.token == "":
		return sigErr("missing Token")
	}
	got, ok := decodeToken(*s.token)
	if !ok {
		return sigErr(fmt.Sprintf("malformed Token: it must be %d lowercase hexadecimal digits", hex.EncodedLen(sha256.Size)))
	}
	usable, match := 0, false
	for _, password := range passwords {
		if len(password) == 0 {
			// Anyone can sign with an empty password.
			continue
		}
		usable++
		sum := s.sum(password)
		if subtle.ConstantTimeCompare(sum[:], got[:]) == 1 {
			match = true // keep going: the time taken does not say which password matched
		}
	}
	switch {
	case usable == 0:
		return sigErr("no terminal password is configured for this endpoint")
	case !match:
		return sigErr("Token does not match")
	}
	return nil
}

func sigErr(reason string) error {
	return fmt.Errorf("%w: %s", ingest.ErrSignature, reason)
}

// decodeToken reads a Token: exactly 64 lowercase hexadecimal digits.
func decodeToken(s string) (sum [sha256.Size]byte, ok bool) {
	if len(s) != hex.EncodedLen(sha256.Size) {
		return sum, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return sum, false
		}
	}
	_, err := hex.Decode(sum[:], []byte(s))
	return sum, err == nil
}

// signed is what scan finds in a body: the signed members, sorted by name,
// and the Token (nil when there is none).
type signed struct {
	members []member
	token   *string
}

// member is a signed top-level member: its name and its value as signed.
type member struct {
	name, value string
}

// sum is the SHA-256 of the signed values with password inserted as the
// member Password.
func (s signed) sum(password []byte) [sha256.Size]byte {
	h := sha256.New()
	placed := false
	for _, m := range s.members {
		if !placed && m.name > passwordMember {
			h.Write(password)
			placed = true
		}
		_, _ = io.WriteString(h, m.value)
	}
	if !placed {
		h.Write(password)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// scan reads the top-level members of body, a JSON object, for its Token.
// Nested objects and arrays are skipped (checked for syntax and depth
// only); duplicate names are refused at the top level, where a parser could
// sign one value and another parser read the other.
func scan(body []byte) (signed, error) {
	var s signed
	if !utf8.Valid(body) {
		return s, errors.New("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return s, syntaxProblem(err, dec)
	}
	if tok != json.Delim('{') {
		return s, errors.New("the body must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return s, syntaxProblem(err, dec)
		}
		name, _ := tok.(string) // inside an object, Token returns a name here
		if seen[name] {
			return s, errors.New("a top-level member name appears twice")
		}
		seen[name] = true
		if name == passwordMember {
			return s, errors.New("the body carries a Password member")
		}
		if tok, err = dec.Token(); err != nil {
			return s, syntaxProblem(err, dec)
		}
		if name == tokenMember {
			v, ok := tok.(string)
			if !ok {
				return s, errors.New("the Token must be a string")
			}
			s.token = &v
			continue
		}
		var value string
		switch v := tok.(type) {
		case json.Delim: // an object or array: not signed
			if err := skip(dec, 2); err != nil {
				return s, err
			}
			continue
		case nil: // not signed
			continue
		case string:
			value = v
		case json.Number:
			value = v.String()
		case bool:
			value = "false"
			if v {
				value = "true"
			}
		}
		s.members = append(s.members, member{name, value})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return s, syntaxProblem(err, dec)
	}
	if _, err := dec.Token(); err != io.EOF {
		return s, errors.New("the body has more data after the JSON object")
	}
	slices.SortFunc(s.members, func(a, b member) int { return strings.Compare(a.name, b.name) })
	return s, nil
}

// skip reads the rest of a nested object or array opened at depth.
func skip(dec *json.Decoder, depth int) error {
	if depth > wire.MaxDepth {
		return fmt.Errorf("the body nests deeper than %d levels", wire.MaxDepth)
	}
	for open := depth; open >= depth; {
		tok, err := dec.Token()
		if err != nil {
			return syntaxProblem(err, dec)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			open++
			if open > wire.MaxDepth {
				return fmt.Errorf("the body nests deeper than %d levels", wire.MaxDepth)
			}
		case json.Delim('}'), json.Delim(']'):
			open--
		}
	}
	return nil
}

func syntaxProblem(err error, dec *json.Decoder) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the body is empty or ends before the JSON object is complete")
	}
	return fmt.Errorf("the body is not valid JSON (error near byte %d)", dec.InputOffset())
}
