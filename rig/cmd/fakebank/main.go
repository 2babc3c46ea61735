// Command fakebank runs a fake T-Bank Internet Acquiring API (v2) for one
// terminal, for development and manual walkthroughs (see rig/fakebank):
// Init, GetState, Confirm and Cancel under /v2/, a page per payment to pay
// or decline it, and signed notifications to the NotificationURL of Init or
// --notify-url.
//
//	FAKEBANK_PASSWORD=… go run ./rig/cmd/fakebank --terminal-key FakeTerminalDEMO \
//	    --notify-url http://127.0.0.1:8081/webhooks/tbank-test
//
// It prints one line per request and per notification: ids, statuses and
// amounts, never the password, a Token or a body.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "fakebank:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	flags := flag.NewFlagSet("fakebank", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var o fakebank.Options
	var passwordEnv string
	var keepID bool
	flags.StringVar(&o.Addr, "listen", "127.0.0.1:8099", "address to listen on")
	flags.StringVar(&o.PublicURL, "public-url", "", "base of the payment page URLs handed out (default: http://LISTEN)")
	flags.StringVar(&o.TerminalKey, "terminal-key", "FakeTerminalDEMO", "the terminal's TerminalKey")
	flags.StringVar(&passwordEnv, "password-env", "FAKEBANK_PASSWORD", "environment variable holding the terminal password")
	flags.StringVar(&o.NotificationURL, "notify-url", "", "where notifications go when Init names no NotificationURL")
	flags.BoolVar(&o.TwoStage, "two-stage", false, "payments wait in AUTHORIZED for Confirm (unless Init's PayType is O)")
	flags.StringVar(&o.DuplicateCode, "duplicate-code", fakebank.CodeDuplicateOrder, "ErrorCode of an Init that repeats an OrderId")
	flags.BoolVar(&keepID, "duplicate-payment-id", true, "name the existing PaymentId in the answer to a repeated OrderId")
	flags.BoolVar(&o.PaymentIDAsString, "payment-id-as-string", false, "write PaymentId as a JSON string (default: a number)")
	flags.Int64Var(&o.FirstPaymentID, "first-payment-id", 0, "PaymentId of the first payment (default: the clock in microseconds, so that a restart never reuses an id)")
	flags.IntVar(&o.Retries, "retries", fakebank.DefaultRetries, "times a notification not answered OK is sent again (0: never)")
	flags.DurationVar(&o.RetryInterval, "retry-interval", fakebank.DefaultRetryInterval, "wait between attempts of a notification")
	flags.DurationVar(&o.NotifyTimeout, "notify-timeout", fakebank.DefaultNotifyTimeout, "bound of one notification attempt")
	flags.IntVar(&o.Misbehaviour.Repeat, "repeat", 1, "send each notification N times at once")
	flags.BoolVar(&o.Misbehaviour.Drop, "drop", false, "send no notifications (only GetState tells what happened)")
	flags.BoolVar(&o.Misbehaviour.WrongToken, "wrong-token", false, "sign notifications with another password")
	if err := flags.Parse(args); err != nil {
		return flag.ErrHelp
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", flags.Args())
	}
	o.Password = []byte(getenv(passwordEnv))
	if len(o.Password) == 0 {
		return fmt.Errorf("the terminal password must be in $%s", passwordEnv)
	}
	o.OmitDuplicatePaymentID = !keepID
	if o.Retries == 0 {
		o.Retries = -1
	}
	if o.FirstPaymentID == 0 {
		o.FirstPaymentID = time.Now().UnixMicro()
	}
	o.Log = slog.New(slog.NewTextHandler(stderr, nil))

	bank, err := fakebank.New(o)
	if err != nil {
		return err
	}
	notify := o.NotificationURL
	if notify == "" {
		notify = "only to Init's NotificationURL"
	}
	o.Log.Info("fakebank serving", "url", bank.URL(), "terminal_key", o.TerminalKey, "password_env", passwordEnv,
		"notify_url", notify, "two_stage", o.TwoStage, "repeat", o.Misbehaviour.Repeat,
		"drop", o.Misbehaviour.Drop, "wrong_token", o.Misbehaviour.WrongToken)
	<-ctx.Done()
	return bank.Close()
}
