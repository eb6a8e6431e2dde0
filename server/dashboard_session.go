package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"time"
)

// A dashboard session holds the keys a person signed in with, at most
// maxSessionKeys of them and one a tenant, each with its own expiry, and
// the tenant the page shows. Every page load checks each key again (a
// revoked or expired key is gone from the session) and shows the tenant
// of a key the session still holds, never any other: the switcher only
// chooses among them, and the cookie, sealed with AES-GCM, cannot be made
// to hold a key its person did not sign in with.

// maxSessionKeys bounds the keys of one session: signing in with one more
// drops the key signed in with first.
const maxSessionKeys = 8

// maxSessionCookie bounds the sealed cookie's length below the 4 KiB a
// browser keeps: signing in with a key that would pass it drops the
// oldest keys first.
const maxSessionCookie = 3800

// sessionAAD binds a cookie to this format: a cookie of the one-key
// format of before does not open, and its person signs in again.
const sessionAAD = sessionCookie + " v2"

// session is what a session cookie holds.
type session struct {
	keys []heldKey
	view string // the tenant the page shows: that of one of keys
}

// heldKey is a credential of a session and when it stops counting.
type heldKey struct {
	cred string
	exp  time.Time
}

// seal returns the session cookie's value for sess.
func (d *dashboard) seal(sess session) string {
	plain := binary.AppendUvarint(nil, uint64(len(sess.view)))
	plain = append(plain, sess.view...)
	for _, k := range sess.keys {
		plain = binary.BigEndian.AppendUint64(plain, uint64(k.exp.UnixMilli()))
		plain = binary.AppendUvarint(plain, uint64(len(k.cred)))
		plain = append(plain, k.cred...)
	}
	nonce := make([]byte, d.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(d.aead.Seal(nonce, nonce, plain, []byte(sessionAAD)))
}

// open returns the session of a cookie's value, without the keys expired
// at now, if this secret sealed it and a key is left.
func (d *dashboard) open(value string, now time.Time) (session, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	n := d.aead.NonceSize()
	if err != nil || len(raw) < n {
		return session{}, false
	}
	plain, err := d.aead.Open(nil, raw[:n], raw[n:], []byte(sessionAAD))
	if err != nil {
		return session{}, false
	}
	var sess session
	text := func() (string, bool) {
		l, w := binary.Uvarint(plain)
		if w <= 0 || l > uint64(len(plain)-w) {
			return "", false
		}
		t := string(plain[w : w+int(l)])
		plain = plain[w+int(l):]
		return t, true
	}
	var ok bool
	if sess.view, ok = text(); !ok {
		return session{}, false
	}
	for len(plain) > 0 {
		if len(plain) < 8 {
			return session{}, false
		}
		exp := int64(binary.BigEndian.Uint64(plain))
		plain = plain[8:]
		cred, ok := text()
		if !ok {
			return session{}, false
		}
		if exp > now.UnixMilli() {
			sess.keys = append(sess.keys, heldKey{cred: cred, exp: time.UnixMilli(exp)})
		}
	}
	return sess, len(sess.keys) > 0
}

// setSession sets the session cookie to sess, in place of any other this
// answer was to set.
func (s *Server) setSession(w http.ResponseWriter, r *http.Request, sess session) string {
	value := s.dash.seal(sess)
	w.Header().Del("Set-Cookie")
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: "/",
		MaxAge: int(sessionTTL.Seconds()), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return value
}

// dashCaller is who a dashboard request runs as.
type dashCaller struct {
	caller
	// sent is the session cookie's value the request came with, which its
	// form's CSRF token must be derived from; session is the value its
	// answer leaves the browser with (sent, unless a key left the
	// session), which the answer's forms derive their tokens from. Both
	// empty without a session.
	sent, session string
	signedIn      bool
	sess          session  // the session, its keys checked
	held          []string // the tenants of sess's keys, in sign-in order
	dropped       bool     // a key was revoked or expired and left the session
}

// dashAuth returns the caller of a dashboard request: the key of its
// session cookie that the session views, or the credential of its
// Authorization header, or, on an open server (neither Token nor
// RequireKey) and without either, the default tenant, as on /v1/. A
// cookie that this server did not seal, or whose keys all expired, counts
// as none. errNoCredential means: show the sign-in form.
func (s *Server) dashAuth(w http.ResponseWriter, r *http.Request) (dashCaller, error) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if sess, ok := s.dash.open(ck.Value, time.Now()); ok {
			return s.sessionCaller(w, r, ck.Value, sess)
		}
	}
	c, err := s.authenticate(r.Context(), r)
	return dashCaller{caller: c}, err
}

// sessionCaller checks each key of sess (the session of the cookie value
// sent) again, drops those no longer valid (and says so to the browser)
// and returns the caller of the key of the tenant the session views, or,
// when that key is gone, of the first key left. errBadCredential when no
// key is left.
func (s *Server) sessionCaller(w http.ResponseWriter, r *http.Request, sent string, sess session) (dashCaller, error) {
	dc := dashCaller{sent: sent, session: sent, signedIn: true}
	held, keys, changed, err := s.checkKeys(r.Context(), sess.keys)
	if err != nil {
		return dc, err
	}
	sess.keys = keys
	view := slices.IndexFunc(held, func(c caller) bool { return c.tenant == sess.view })
	if view < 0 { // the viewed tenant's key is gone: show the first key's
		view, changed = 0, true
		sess.view = held[0].tenant
	}
	dc.caller = held[view]
	if changed {
		dc.dropped = true
		dc.session = s.setSession(w, r, sess)
	}
	dc.sess = sess
	for _, c := range held {
		dc.held = append(dc.held, c.tenant)
	}
	return dc, nil
}

// checkKeys verifies each of keys and returns the callers and keys of
// those still valid, whether any was dropped, and errBadCredential when
// none is left. Any other error is the database's.
func (s *Server) checkKeys(ctx context.Context, keys []heldKey) ([]caller, []heldKey, bool, error) {
	var held []caller
	var kept []heldKey
	for _, k := range keys {
		c, err := s.credential(ctx, k.cred)
		switch {
		case errors.Is(err, errBadCredential):
			continue
		case err != nil:
			return nil, nil, false, err
		}
		held, kept = append(held, c), append(kept, k)
	}
	if len(held) == 0 {
		return nil, nil, true, errBadCredential
	}
	return held, kept, len(kept) < len(keys), nil
}

// dashboardLogin checks the key of the sign-in form and, when it is a
// valid credential, starts a session, or, when the request holds one
// already (and the form its CSRF token), adds the key to it: an
// HttpOnly, SameSite=Strict cookie (Secure over TLS) holding the keys
// sealed with their expiries. The page then shows the new key's tenant; a
// key of a tenant the session held is replaced.
func (s *Server) dashboardLogin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		s.message(w, r, http.StatusForbidden, "Cross-site sign-in refused.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxKeyForm)
	key := r.PostFormValue("key")
	var sess session
	ck, err := r.Cookie(sessionCookie)
	if err == nil {
		var ok bool
		if sess, ok = s.dash.open(ck.Value, time.Now()); ok && !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.dash.csrf(ck.Value))) {
			s.message(w, r, http.StatusForbidden, "This form is stale or came from another site. Reload the dashboard and try again.")
			return
		}
	}
	if key == "" {
		s.signIn(w, r, "Enter an API key or the server's token.")
		return
	}
	c, err := s.credential(r.Context(), key)
	if err != nil {
		if errors.Is(err, errBadCredential) && len(sess.keys) > 0 {
			s.message(w, r, http.StatusUnauthorized, "That key is not valid here (unknown, revoked or malformed); the session is as it was.")
			return
		}
		s.dashRefuse(w, r, err)
		return
	}
	var keys []heldKey
	if len(sess.keys) > 0 {
		held, kept, _, err := s.checkKeys(r.Context(), sess.keys)
		if err != nil && !errors.Is(err, errBadCredential) {
			s.dashRefuse(w, r, err)
			return
		}
		for i, k := range kept {
			if held[i].tenant != c.tenant {
				keys = append(keys, k)
			}
		}
	}
	next := session{keys: append(keys, heldKey{cred: key, exp: time.Now().Add(sessionTTL)}), view: c.tenant}
	for len(next.keys) > 1 && (len(next.keys) > maxSessionKeys || len(s.dash.seal(next)) > maxSessionCookie) {
		next.keys = next.keys[1:]
	}
	s.setSession(w, r, next)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// dashboardSwitch shows the tenant of another key the session holds
// (form field tenant), after dashForm's checks: a tenant whose key the
// session does not hold is 404 and changes nothing.
func (s *Server) dashboardSwitch(w http.ResponseWriter, r *http.Request) {
	c, ok := s.dashForm(w, r)
	if !ok {
		return
	}
	if !c.signedIn {
		s.message(w, r, http.StatusNotFound, "Only a signed-in session holds keys to switch among.")
		return
	}
	want := r.PostFormValue("tenant")
	if !slices.Contains(c.held, want) {
		s.message(w, r, http.StatusNotFound, "This session holds no key of that tenant: sign in with one to add it.")
		return
	}
	sess := c.sess
	sess.view = want
	s.setSession(w, r, sess)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
