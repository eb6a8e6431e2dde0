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
	"encoding/binary"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"

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
var DashboardRoutes = []string{"GET /{$}", "POST /login", "POST /logout", "POST /outbox/dead/{id}/redrive"}

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
	page, login, message *template.Template
	csp                  string
	aead                 cipher.AEAD
	csrfKey              []byte
}

func (s *Server) dashboardRoutes() {
	secret := s.opts.DashboardSecret
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret) // never fails (crypto/rand)
	}
	s.dash = newDashboard(secret)
	s.dashSQL = query.MustLoad(dashFiles, "dashboard/sql", s.db.Engine())
	s.handle(DashboardRoutes[0], http.HandlerFunc(s.dashboardPage))
	s.handle(DashboardRoutes[1], http.HandlerFunc(s.dashboardLogin))
	s.handle(DashboardRoutes[2], http.HandlerFunc(s.dashboardLogout))
	s.handle(DashboardRoutes[3], http.HandlerFunc(s.dashboardRedrive))
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
		page: parse("page.html"), login: parse("login.html"), message: parse("message.html"),
		// Nothing but the inline style sheet, the inline SVG and forms to
		// this origin: no script runs, no frame embeds the page.
		csp:     "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		aead:    aead,
		csrfKey: derive("csrf"),
	}
}

// seal returns the session cookie's value for credential, valid until exp.
func (d *dashboard) seal(credential string, exp time.Time) string {
	plain := binary.BigEndian.AppendUint64(nil, uint64(exp.UnixMilli()))
	plain = append(plain, credential...)
	nonce := make([]byte, d.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(d.aead.Seal(nonce, nonce, plain, []byte(sessionCookie)))
}

// open returns the credential of a session cookie's value, if the cookie
// was sealed by this secret and has not expired at now.
func (d *dashboard) open(value string, now time.Time) (string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	n := d.aead.NonceSize()
	if err != nil || len(raw) < n {
		return "", false
	}
	plain, err := d.aead.Open(nil, raw[:n], raw[n:], []byte(sessionCookie))
	if err != nil || len(plain) < 8 || int64(binary.BigEndian.Uint64(plain)) <= now.UnixMilli() {
		return "", false
	}
	return string(plain[8:]), true
}

// csrf returns the token a form must carry: an HMAC of the session
// cookie's value (empty on an open server), which a page of another site
// can neither read nor compute.
func (d *dashboard) csrf(session string) string {
	m := hmac.New(sha256.New, d.csrfKey)
	m.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// dashCaller is who a dashboard request runs as.
type dashCaller struct {
	caller
	session  string // the session cookie's value; empty without one
	signedIn bool
}

// dashAuth returns the caller of a dashboard request: the credential of
// its session cookie, or of its Authorization header, or, on an open
// server (neither Token nor RequireKey) and without either, the default
// tenant, as on /v1/. A cookie that this server did not seal, or whose
// session expired, counts as none. errNoCredential means: show the
// sign-in form.
func (s *Server) dashAuth(r *http.Request) (dashCaller, error) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if cred, ok := s.dash.open(ck.Value, time.Now()); ok {
			c, err := s.credential(r.Context(), cred)
			return dashCaller{caller: c, session: ck.Value, signedIn: true}, err
		}
	}
	c, err := s.authenticate(r)
	return dashCaller{caller: c}, err
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
	c, err := s.dashAuth(r)
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
	now := time.Now()
	d := &dashData{Title: "Dashboard", Tenant: c.tenant, Engine: s.db.Engine(), Admin: c.scopes.Has(apikey.Admin), CSRF: s.dash.csrf(c.session),
		SignedIn: c.signedIn, ReadAt: formatTime(now), Limit: dashLimit,
		Charts: s.rates.charts(c.tenant, now), ChartsEnd: now.UTC().Format("15:04 UTC")}
	if id, err := strconv.ParseInt(r.URL.Query().Get("redriven"), 10, 64); err == nil && id > 0 {
		d.Redriven = strconv.FormatInt(id, 10)
	}
	if err := s.load(ctx, d); err != nil {
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

// dashboardLogin checks the key of the sign-in form and, when it is a
// valid credential, starts a session: an HttpOnly, SameSite=Strict cookie
// (Secure over TLS) holding the key sealed with its expiry.
func (s *Server) dashboardLogin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		s.message(w, r, http.StatusForbidden, "Cross-site sign-in refused.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxKeyForm)
	key := r.PostFormValue("key")
	if key == "" {
		s.signIn(w, r, "Enter an API key or the server's token.")
		return
	}
	if _, err := s.credential(r.Context(), key); err != nil {
		s.dashRefuse(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.dash.seal(key, time.Now().Add(sessionTTL)), Path: "/",
		MaxAge: int(sessionTTL.Seconds()), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// dashForm authenticates a dashboard POST and checks its CSRF token; it
// answers the refusal itself and reports whether to go on.
func (s *Server) dashForm(w http.ResponseWriter, r *http.Request) (dashCaller, bool) {
	c, err := s.dashAuth(r)
	if err != nil {
		s.dashRefuse(w, r, err)
		return c, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxKeyForm)
	got := r.PostFormValue("csrf")
	if !sameOrigin(r) || !hmac.Equal([]byte(got), []byte(s.dash.csrf(c.session))) {
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

// dashboardRedrive makes a dead outbox message of the caller's tenant due
// again (outbox.Redrive, as POST /v1/outbox/dead/{id}/redrive does): admin
// scope and a valid CSRF token required.
func (s *Server) dashboardRedrive(w http.ResponseWriter, r *http.Request) {
	c, ok := s.dashForm(w, r)
	if !ok {
		return
	}
	if !c.scopes.Has(apikey.Admin) {
		s.message(w, r, http.StatusForbidden, "Redriving needs a key with the admin scope.")
		return
	}
	id, err := deadID(r)
	if err != nil {
		s.message(w, r, http.StatusBadRequest, "That is not a message id.")
		return
	}
	ctx, err := tenant.With(r.Context(), c.tenant)
	if err != nil {
		s.dashRefuse(w, r, err)
		return
	}
	var ids []int64
	err = s.writing(ctx, func(ctx context.Context, exec racefree.Executor) error {
		o, err := s.Outbox()
		if err != nil {
			return err
		}
		ids, err = o.Redrive(ctx, exec, outbox.Filter{IDs: []int64{id}})
		return err
	})
	switch {
	case err != nil:
		s.dashRefuse(w, r, err)
	case len(ids) == 0:
		s.message(w, r, http.StatusNotFound, "No dead message "+strconv.FormatInt(id, 10)+" here: it was redriven or discarded already.")
	default:
		http.Redirect(w, r, "/?redriven="+strconv.FormatInt(id, 10)+"#outbox", http.StatusSeeOther)
	}
}
