package fakebank

import (
	"errors"
	"html/template"
	"net/http"
)

// page shows a payment to the payer.
var page = template.Must(template.New("pay").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Fake T-Bank: payment {{.PaymentID}}</title></head>
<body>
<h1>Fake T-Bank</h1>
<p>Order {{.OrderID}}{{with .Description}}: {{.}}{{end}}</p>
<p>Amount: {{.Amount}} kopecks</p>
<p>Payment {{.PaymentID}}: <strong>{{.Status}}</strong></p>
{{if eq .Status "NEW"}}<form method="post">
<button name="action" value="pay">Pay</button>
<button name="action" value="decline">Decline</button>
</form>{{end}}
</body></html>
`))

// servePage handles GET /pay/{id}.
func (b *Bank) servePage(w http.ResponseWriter, r *http.Request) {
	p, ok := b.Payment(r.PathValue("id"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = page.Execute(w, p)
}

// servePay handles POST /pay/{id}: Pay, or Decline with action=decline,
// then shows the page again.
func (b *Bank) servePay(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "malformed form", http.StatusBadRequest)
		return
	}
	pay, action := b.Pay, "pay"
	if r.PostForm.Get("action") == "decline" {
		pay, action = b.Decline, "decline"
	}
	err := pay(id)
	b.log.Info(action, "payment_id", id, "ok", err == nil)
	switch {
	case errors.Is(err, ErrNotFound):
		http.NotFound(w, r)
	case err != nil:
		http.Error(w, err.Error(), http.StatusConflict)
	default:
		http.Redirect(w, r, r.URL.Path, http.StatusSeeOther)
	}
}
