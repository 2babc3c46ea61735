package fulfillment

import (
	"errors"
	"fmt"

	"github.com/shopspring/decimal"
)

// Unit is what an amount counts: a token on a network (crypto providers),
// or an ISO 4217 currency (banks). Exactly one of the two is set; the zero
// Unit means "no amount".
type Unit struct {
	// Token and Network name a token on a network, e.g. USDT on TRON.
	Token, Network string
	// Currency is an ISO 4217 code, e.g. RUB. Amounts in a currency count
	// its minor units (kopecks, cents).
	Currency string
}

// TokenUnit is the unit of token on network.
func TokenUnit(token, network string) Unit { return Unit{Token: token, Network: network} }

// CurrencyUnit is the unit of an ISO 4217 currency, counted in minor units.
func CurrencyUnit(code string) Unit { return Unit{Currency: code} }

// IsToken reports whether u is a token on a network.
func (u Unit) IsToken() bool { return u.Token != "" || u.Network != "" }

// IsCurrency reports whether u is a currency.
func (u Unit) IsCurrency() bool { return u.Currency != "" }

// String names the unit, e.g. "USDT on TRON" or "RUB".
func (u Unit) String() string {
	if u.IsCurrency() {
		return u.Currency
	}
	return u.Token + " on " + u.Network
}

// Amount is a quantity of a unit: token units, or minor units of a
// currency. The zero Amount is "no amount".
type Amount struct {
	Value decimal.Decimal
	Unit  Unit
}

// TokenAmount is value tokens on network, e.g. 25.000000 USDT on TRON.
func TokenAmount(value decimal.Decimal, token, network string) Amount {
	return Amount{Value: value, Unit: TokenUnit(token, network)}
}

// MinorAmount is minor units of a currency, e.g. 250000 RUB (2,500.00).
func MinorAmount(minorUnits int64, currency string) Amount {
	return Amount{Value: decimal.NewFromInt(minorUnits), Unit: CurrencyUnit(currency)}
}

// Known reports whether a carries an amount. An amount whose unit is
// missing is still "known": validation refuses it.
func (a Amount) Known() bool { return a.Unit != Unit{} || !a.Value.IsZero() }

// Equal reports whether a and b are the same amount of the same unit,
// however their values are written (10 and 10.0 are equal).
func (a Amount) Equal(b Amount) bool { return a.Unit == b.Unit && a.Value.Equal(b.Value) }

// String renders the amount, e.g. "25 USDT on TRON" or "250000 RUB minor units".
func (a Amount) String() string {
	switch {
	case !a.Known():
		return "no amount"
	case a.Unit.IsCurrency():
		return fmt.Sprintf("%s %s minor units", a.Value, a.Unit.Currency)
	}
	return fmt.Sprintf("%s %s", a.Value, a.Unit)
}

// checkUnit returns the field (token, network or currency) that makes u
// invalid and why, or "" and nil.
func checkUnit(u Unit) (field string, err error) {
	switch {
	case u.IsToken() && u.IsCurrency():
		return "currency", errors.New("an amount is in a token on a network or in a currency, not both")
	case u.IsToken():
		if err := RuleToken.Check(u.Token); u.Token == "" || err != nil {
			return "token", fmt.Errorf("a symbol such as USDT: printable ASCII without spaces, %d bytes at most", MaxTokenLen)
		}
		if err := RuleNetwork.Check(u.Network); u.Network == "" || err != nil {
			return "network", fmt.Errorf("a name such as TRON: printable ASCII without spaces, %d bytes at most", MaxNetworkLen)
		}
	case !currencyPattern.MatchString(u.Currency):
		return "currency", errors.New("an amount needs its unit: a token and network, or a three-letter ISO 4217 currency in capitals such as RUB")
	}
	return "", nil
}
