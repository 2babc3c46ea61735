package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// pager pages a keyset listing, newest first: it asks storage for one row
// more than the page, which tells whether a next page exists.
type pager struct {
	limit    int
	maxBytes int    // encoded items of one page
	before   string // position to continue after; "" on the first page
	digest   string
}

// newPager reads page_size and page_token. A token is bound to the digest of
// the filters it was issued for, so it cannot be replayed with other filters
// (or by a caller who sees other orgs).
func newPager(pageSize int32, token, digest string) (pager, error) {
	limit, err := fulfillment.PageSize(pageSize)
	if err != nil {
		return pager{}, err
	}
	p := pager{limit: limit, digest: digest}
	if token != "" {
		if p.before, err = decodePageToken(token, digest); err != nil {
			return pager{}, badPageToken()
		}
	}
	return p, nil
}

// pageRequest is a listing request's paging fields.
type pageRequest interface {
	GetPageSize() int32
	GetPageToken() string
}

// listing checks a listing request: its filter (invalid is the filter's
// validation error), the caller's right to the org it names, and its paging,
// bound to the filters.
func (s *Service) listing(ctx context.Context, p *Principal, invalid error, org string, req pageRequest, filters ...any) (pager, error) {
	if invalid != nil {
		return pager{}, toStatus(ctx, s.log, invalid)
	}
	if org != "" {
		if err := requireOrg(p, org); err != nil {
			return pager{}, err
		}
	}
	pg, err := newPager(req.GetPageSize(), req.GetPageToken(), pageDigest(filters...))
	if err != nil {
		return pager{}, toStatus(ctx, s.log, err)
	}
	pg.maxBytes = s.maxPageBytes
	return pg, nil
}

// listChunk is how many rows one storage read of a listing asks for (one
// more, which tells whether more follow): a page that its byte bound stops
// early has not read far past its end.
const listChunk = 100

// fillPage reads and renders one page: at most p.limit rows, and no more
// than p.maxBytes of encoded items — so a page may hold fewer rows than
// asked for, and still have a next page. The first row is always rendered
// (the largest item is far below the bound). fetch reads up to limit rows
// after the position before ("" for the start); the next page token
// continues after the last row rendered.
func fillPage[T any, P proto.Message](p pager, fetch func(before string, limit int) ([]T, error),
	render func(T) P, cursor func(T) string) (page []P, nextToken string, err error) {
	page = make([]P, 0, min(p.limit, listChunk))
	size, before, last := 0, p.before, ""
	for {
		want := min(p.limit-len(page), listChunk)
		rows, err := fetch(before, want+1)
		if err != nil {
			return nil, "", err
		}
		for _, row := range rows[:min(len(rows), want)] {
			item := render(row)
			// The encoded size of the item within the repeated field.
			n := protowire.SizeBytes(proto.Size(item)) + 1
			if len(page) > 0 && p.maxBytes > 0 && size+n > p.maxBytes {
				return page, encodePageToken(last, p.digest), nil
			}
			page, size, last = append(page, item), size+n, cursor(row)
		}
		switch {
		case len(rows) <= want:
			return page, "", nil
		case len(page) == p.limit:
			return page, encodePageToken(last, p.digest), nil
		}
		before = last
	}
}

type pageToken struct {
	Before string `json:"b"`
	Filter string `json:"f"`
}

// pageDigest identifies a listing's filters and the caller's visible orgs:
// strings, lists of strings and integers (times as Unix nanoseconds),
// written as JSON, which tells every value apart (%q wrote every integer
// past U+10FFFF as the same replacement character: each time filter alike).
func pageDigest(parts ...any) string {
	b, _ := json.Marshal(parts) // strings, lists and integers always marshal
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

func encodePageToken(before, digest string) string {
	b, _ := json.Marshal(pageToken{Before: before, Filter: digest})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodePageToken(token, digest string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", err
	}
	var t pageToken
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", err
	}
	if t.Filter != digest || t.Before == "" {
		return "", errors.New("page token issued for other filters")
	}
	return t.Before, nil
}

func badPageToken() error {
	return &fulfillment.ValidationError{Violations: []fulfillment.FieldViolation{{
		Field:       "page_token",
		Description: "is not a token from a previous response with the same filters; start again without page_token",
	}}}
}

// fillIDPage is fillPage for a listing by numeric id, newest first: fetch
// takes the id the page continues below (0 for the start). A token whose
// position is not an id was not issued by this listing.
func fillIDPage[T any, P proto.Message](p pager, fetch func(beforeID int64, limit int) ([]T, error),
	render func(T) P, id func(T) int64) (page []P, nextToken string, err error) {
	if _, err = beforeID(p.before); err != nil {
		return nil, "", err
	}
	return fillPage(p, func(before string, limit int) ([]T, error) {
		n, err := beforeID(before)
		if err != nil {
			return nil, err
		}
		return fetch(n, limit)
	}, render, func(row T) string { return strconv.FormatInt(id(row), 10) })
}

// beforeID reads a numeric listing's position: "" is the start (0).
func beforeID(before string) (int64, error) {
	if before == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(before, 10, 64)
	if err != nil || n <= 0 {
		return 0, badPageToken()
	}
	return n, nil
}
