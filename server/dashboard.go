package server

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// The dashboard's templates, style sheet and read queries.
//
//go:embed dashboard
var dashFiles embed.FS

// DashboardRoutes are the dashboard's routes: HTML for a browser, not
// the JSON API.
var DashboardRoutes = []string{"GET /{$}", "POST /login", "POST /logout", "POST /outbox/dead/{id}/redrive",
	"GET /outbox/dead/{id}", "POST /outbox/dead/{id}/discard", "POST /switch"}

const (
	// sessionCookie holds a dashboard session: the credential the person
	// signed in with, sealed under the server's session secret with its
	// expiry.
	sessionCookie = "racefree_session"
	// sessionTTL is how long a session lasts; then the person signs in
	// again.
	sessionTTL = 8 * time.Hour
	// maxKeyForm bounds the login form's body.
	maxKeyForm = 4 << 10
)

// dashboard is the dashboard's state: its templates, queries and the
// secret sessions are sealed with.
type dashboard struct {
	page, login, message, dead *template.Template
	csp                        string
	aead                       cipher.AEAD
	csrfKey                    []byte
	// outboxSQL is /metrics's outbox query: the dashboard reads the
	// earliest time a pending message is or was due from it.
	outboxSQL string
}

func (s *Server) dashboardRoutes() {
	secret := s.opts.DashboardSecret
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret) // never fails (crypto/rand)
	}
	s.dash = newDashboard(secret)
	s.dashSQL = query.MustLoad(dashFiles, "dashboard/sql", s.db.Engine())
	s.dash.outboxSQL = query.MustLoad(metricsFiles, "metrics/sql", s.db.Engine()).Get("outbox")
	s.handle(DashboardRoutes[0], http.HandlerFunc(s.dashboardPage))
	s.handle(DashboardRoutes[1], http.HandlerFunc(s.dashboardLogin))
	s.handle(DashboardRoutes[2], http.HandlerFunc(s.dashboardLogout))
	s.handle(DashboardRoutes[3], http.HandlerFunc(s.dashboardRedrive))
	s.handle(DashboardRoutes[4], http.HandlerFunc(s.dashboardDead))
	s.handle(DashboardRoutes[5], http.HandlerFunc(s.dashboardDiscard))
	s.handle(DashboardRoutes[6], http.HandlerFunc(s.dashboardSwitch))
}

func newDashboard(secret []byte) *dashboard {
	derive := func(purpose string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte("racefree dashboard " + purpose))
		return m.Sum(nil)
	}
	block, _ := aes.NewCipher(derive("session")) // a 32-byte key: cannot fail
	aead, _ := cipher.NewGCM(block)              // cannot fail for AES
	css, _ := dashFiles.ReadFile("dashboard/style.css")
	sum := sha256.Sum256(css)
	funcs := template.FuncMap{
		"css": func() template.CSS { return template.CSS(css) },
		"add": func(a, b int64) int64 { return a + b },
		"dur": func(d time.Duration) string { return span(d.Milliseconds()) },
	}
	parse := func(name string) *template.Template {
		return template.Must(template.New(name).Funcs(funcs).ParseFS(dashFiles, "dashboard/layout.html", "dashboard/"+name))
	}
	return &dashboard{
		page: parse("page.html"), login: parse("login.html"), message: parse("message.html"), dead: parse("dead.html"),
		// Nothing but the inline style sheet, the inline SVG and forms to
		// this origin: no script runs, no frame embeds the page.
		csp:     "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		aead:    aead,
		csrfKey: derive("csrf"),
	}
}

// csrf returns the token a form must carry: an HMAC of the session
// cookie's value (empty on an open server), which a page of another site
// can neither read nor compute.
func (d *dashboard) csrf(session string) string {
	m := hmac.New(sha256.New, d.csrfKey)
	m.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// dashHeaders sets what every dashboard answer carries: private, never
// cached, never framed, no script.
func (s *Server) dashHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", s.dash.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // with no-referrer, browsers send Origin: null on the forms' POSTs
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, t *template.Template, status int, data any) {
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", data); err != nil {
		s.log.ErrorContext(r.Context(), "dashboard template", "err", err)
		status, buf = http.StatusInternalServerError, *bytes.NewBufferString("internal error\n")
	}
	s.dashHeaders(w)
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// message answers a dashboard request with a short page: status and text.
func (s *Server) message(w http.ResponseWriter, r *http.Request, status int, text string) {
	s.render(w, r, s.dash.message, status, map[string]any{"Title": http.StatusText(status), "Text": text})
}

// signIn answers with the sign-in form (401), and note above it.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, note string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="racefree"`)
	s.render(w, r, s.dash.login, http.StatusUnauthorized, map[string]any{"Title": "Sign in", "Note": note})
}

// dashRefuse answers a request dashAuth refused.
func (s *Server) dashRefuse(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errNoCredential):
		s.signIn(w, r, "")
	case errors.Is(err, errBadCredential):
		s.clearSession(w, r)
		s.signIn(w, r, "That key is not valid here (unknown, revoked or malformed), or the session expired.")
	default:
		s.log.ErrorContext(r.Context(), "dashboard", "err", err)
		s.message(w, r, http.StatusServiceUnavailable, "The database is unavailable or busy. Reload in a moment.")
	}
}

// dashboardPage shows the caller's tenant, or the sign-in form.
func (s *Server) dashboardPage(w http.ResponseWriter, r *http.Request) {
	c, err := s.dashAuth(w, r)
	if err != nil {
		s.dashRefuse(w, r, err)
		return
	}
	if !c.scopes.Has(apikey.Read) {
		s.message(w, r, http.StatusForbidden, "This key lacks the read scope the dashboard needs.")
		return
	}
	ctx, err := tenant.With(r.Context(), c.tenant)
	if err != nil {
		s.dashRefuse(w, r, err)
		return
	}
	lists, err := parseLists(r.URL.Query())
	if err != nil {
		s.message(w, r, http.StatusBadRequest, "A list's filter or page is not valid: "+err.Error())
		return
	}
	now := time.Now()
	d := &dashData{Title: "Dashboard", Tenant: c.tenant, Engine: s.db.Engine(), Admin: c.scopes.Has(apikey.Admin), CSRF: s.dash.csrf(c.session),
		SignedIn: c.signedIn, ReadAt: formatTime(now), Limit: dashLimit,
		Charts: s.rates.charts(c.tenant, now), ChartsEnd: now.UTC().Format("15:04 UTC"), Lists: lists, Held: c.held, Dropped: c.dropped}
	if id, err := strconv.ParseInt(r.URL.Query().Get("redriven"), 10, 64); err == nil && id > 0 {
		d.Redriven = strconv.FormatInt(id, 10)
	}
	if id, err := strconv.ParseInt(r.URL.Query().Get("discarded"), 10, 64); err == nil && id > 0 {
		d.Discarded = strconv.FormatInt(id, 10)
	}
	if err := s.load(ctx, d); err != nil {
		if errors.Is(err, racefree.ErrInvalidInput) {
			s.message(w, r, http.StatusBadRequest, "A list's filter or page is not valid: "+err.Error())
			return
		}
		s.dashRefuse(w, r, err)
		return
	}
	s.render(w, r, s.dash.page, http.StatusOK, d)
}

// sameOrigin reports whether a form POST may come from r's origin: a
// browser sends Origin on every POST; one naming another origin, or the
// opaque "null" of a sandboxed frame or a data: page, is a cross-site
// request, refused whatever else it carries.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func (s *Server) clearSession(w http.ResponseWriter, r *http.Request) {
	w.Header().Del("Set-Cookie") // in place of a session this answer was to renew
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// dashForm authenticates a dashboard POST and checks its CSRF token; it
// answers the refusal itself and reports whether to go on.
func (s *Server) dashForm(w http.ResponseWriter, r *http.Request) (dashCaller, bool) {
	c, err := s.dashAuth(w, r)
	if err != nil {
		s.dashRefuse(w, r, err)
		return c, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxKeyForm)
	got := r.PostFormValue("csrf")
	if !sameOrigin(r) || !hmac.Equal([]byte(got), []byte(s.dash.csrf(c.sent))) {
		s.message(w, r, http.StatusForbidden, "This form is stale or came from another site. Reload the dashboard and try again.")
		return c, false
	}
	return c, true
}

func (s *Server) dashboardLogout(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.dashForm(w, r); !ok {
		return
	}
	s.clearSession(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// deadLetterRequest checks what a request on the path's dead message
// needs once c, its caller, is known: c's key has scope (else 403 with
// denied) and the path's id is a message id (else 400). It returns the
// context of c's tenant and the id, or answers the refusal itself and
// reports false.
func (s *Server) deadLetterRequest(w http.ResponseWriter, r *http.Request, c dashCaller, scope apikey.Scope, denied string) (context.Context, int64, bool) {
	if !c.scopes.Has(scope) {
		s.message(w, r, http.StatusForbidden, denied)
		return nil, 0, false
	}
	id, err := deadID(r)
	if err != nil {
		s.message(w, r, http.StatusBadRequest, "That is not a message id.")
		return nil, 0, false
	}
	ctx, err := tenant.With(r.Context(), c.tenant)
	if err != nil {
		s.dashRefuse(w, r, err)
		return nil, 0, false
	}
	return ctx, id, true
}

// dashboardRedrive makes a dead outbox message of the caller's tenant due
// again (outbox.Redrive, as POST /v1/outbox/dead/{id}/redrive does): admin
// scope and a valid CSRF token required.
func (s *Server) dashboardRedrive(w http.ResponseWriter, r *http.Request) {
	s.dashRepair(w, r, "redriven", "Redriving", func(o *outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error) {
		return o.Redrive
	})
}

// dashboardDiscard deletes a dead outbox message of the caller's tenant
// and its history (outbox.Discard, as POST /v1/outbox/dead/{id}/discard
// does): admin scope and a valid CSRF token required.
func (s *Server) dashboardDiscard(w http.ResponseWriter, r *http.Request) {
	s.dashRepair(w, r, "discarded", "Discarding", func(o *outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error) {
		return o.Discard
	})
}

// dashRepair runs op on the path's dead message of the caller's tenant,
// after dashForm's checks and with the admin scope, and sends the person
// back to the dashboard's outbox section saying what it did (done).
func (s *Server) dashRepair(w http.ResponseWriter, r *http.Request, done, doing string,
	op func(*outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error)) {
	c, ok := s.dashForm(w, r)
	if !ok {
		return
	}
	ctx, id, ok := s.deadLetterRequest(w, r, c, apikey.Admin, doing+" needs a key with the admin scope.")
	if !ok {
		return
	}
	var ids []int64
	err := s.writing(ctx, func(ctx context.Context, exec racefree.Executor) error {
		o, err := s.Outbox()
		if err != nil {
			return err
		}
		ids, err = op(o)(ctx, exec, outbox.Filter{IDs: []int64{id}})
		return err
	})
	switch {
	case err != nil:
		s.dashRefuse(w, r, err)
	case len(ids) == 0:
		s.message(w, r, http.StatusNotFound, "No dead message "+strconv.FormatInt(id, 10)+" here: it was redriven or discarded already.")
	default:
		http.Redirect(w, r, "/?"+done+"="+strconv.FormatInt(id, 10)+"#outbox", http.StatusSeeOther)
	}
}

// deadDetail is the dead-letter page: one dead message of the caller's
// tenant, its payload, headers and every recorded attempt.
type deadDetail struct {
	Title, Tenant, CSRF string
	Admin, SignedIn     bool
	Msg                 deadMessage
	Payload             string // the payload as text (JSON indented), or base64
	PayloadKind         string // "JSON", "text" or "base64"
	Headers             []dashHeader
	History             []dashAttempt
}

type dashHeader struct{ Name, Value string }

type dashAttempt struct {
	Attempt        int
	Fence          int64
	Worker, At     string
	Outcome, Error string
}

// dashboardDead shows one dead message of the caller's tenant: its
// payload, headers and each failed attempt with its error, with Redrive
// and Discard for an admin. A message of another tenant, or one that is
// not dead, is 404, and the page says nothing of it.
func (s *Server) dashboardDead(w http.ResponseWriter, r *http.Request) {
	c, err := s.dashAuth(w, r)
	if err != nil {
		s.dashRefuse(w, r, err)
		return
	}
	ctx, id, ok := s.deadLetterRequest(w, r, c, apikey.Read, "This key lacks the read scope the dashboard needs.")
	if !ok {
		return
	}
	o, err := s.Outbox()
	if err != nil {
		s.dashRefuse(w, r, err)
		return
	}
	var rec *outbox.Record
	err = s.reading(ctx, func(ctx context.Context, exec racefree.Executor) (err error) {
		rec, err = o.Get(ctx, exec, id)
		return err
	})
	switch {
	case errors.Is(err, racefree.ErrNotFound) || (err == nil && rec.State != outbox.Dead):
		s.message(w, r, http.StatusNotFound, "No dead message "+strconv.FormatInt(id, 10)+" here: it was redriven or discarded, or never died.")
		return
	case err != nil:
		s.dashRefuse(w, r, err)
		return
	}
	d := &deadDetail{Title: "Dead letter " + strconv.FormatInt(id, 10), Tenant: c.tenant, CSRF: s.dash.csrf(c.session),
		Admin: c.scopes.Has(apikey.Admin), SignedIn: c.signedIn, Msg: toDeadMessage(rec)}
	switch {
	case len(rec.Payload) > 0 && json.Valid(rec.Payload):
		var b bytes.Buffer
		_ = json.Indent(&b, rec.Payload, "", "  ")
		d.Payload, d.PayloadKind = b.String(), "JSON"
	case utf8.Valid(rec.Payload):
		d.Payload, d.PayloadKind = string(rec.Payload), "text"
	default:
		d.Payload, d.PayloadKind = base64.StdEncoding.EncodeToString(rec.Payload), "base64"
	}
	for _, k := range slices.Sorted(maps.Keys(rec.Headers)) {
		d.Headers = append(d.Headers, dashHeader{k, rec.Headers[k]})
	}
	for _, a := range rec.History {
		d.History = append(d.History, dashAttempt{Attempt: a.Attempt, Fence: a.Fence, Worker: a.Worker, At: formatTime(a.At), Outcome: a.Outcome, Error: a.Error})
	}
	s.render(w, r, s.dash.dead, http.StatusOK, d)
}
