package audit

import (
	"bufio"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/racefree/racefree"
)

// EnvKeys is the environment variable KeyringFromEnv reads.
const EnvKeys = "RACEFREE_AUDIT_KEYS"

// MaxKeyIDLen bounds a key id, in bytes.
const MaxKeyIDLen = 64

// Keyring represents the keys of an audit log: HMAC keys by id, of which the
// last one listed is current (new scopes start under it and Append rotates
// every scope to it), and Ed25519 checkpoint keys by id, of which the last
// private one listed signs. Keys are loaded from a file or the environment
// and never stored in the database; no error, log line or metric of this
// package carries key material, only key ids.
//
// A keyring is text, one key a line, blank lines and # comments ignored:
//
//	mac    <id> <32 bytes, standard base64>
//	sign   <id> <Ed25519 seed, 32 bytes, standard base64>
//	verify <id> <Ed25519 public key, 32 bytes, standard base64>
//
// A verifier that must not be able to sign needs only the mac and verify
// lines. Keygen writes a new keyring. An id names one key: a mac key id
// listed twice is refused, and so is a checkpoint key id (sign or verify)
// listed again with another key.
type Keyring struct {
	macs    map[string][]byte
	current string
	signers map[string]ed25519.PrivateKey
	signer  string
	publics map[string]ed25519.PublicKey
}

// ParseKeyring parses a keyring's text. Its errors name the line and the
// key id, never the key.
func ParseKeyring(text string) (*Keyring, error) {
	k := &Keyring{macs: map[string][]byte{}, signers: map[string]ed25519.PrivateKey{}, publics: map[string]ed25519.PublicKey{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("audit: keyring line %d: want \"<mac|sign|verify> <id> <base64>\"", n)
		}
		kind, id := f[0], f[1]
		if err := racefree.CheckText("key id", id, MaxKeyIDLen); err != nil {
			return nil, fmt.Errorf("audit: keyring line %d: %w", n, err)
		}
		b, err := base64.StdEncoding.DecodeString(f[2])
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("audit: keyring line %d: key %q is not 32 bytes of standard base64", n, id)
		}
		switch kind {
		case "mac":
			if _, dup := k.macs[id]; dup {
				return nil, fmt.Errorf("audit: keyring line %d: mac key %q appears twice", n, id)
			}
			k.macs[id], k.current = b, id
		case "sign":
			priv := ed25519.NewKeyFromSeed(b)
			if err := k.addPublic(n, id, priv.Public().(ed25519.PublicKey)); err != nil {
				return nil, err
			}
			k.signers[id], k.signer = priv, id
		case "verify":
			if err := k.addPublic(n, id, ed25519.PublicKey(b)); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("audit: keyring line %d: unknown kind %q", n, kind)
		}
	}
	if len(k.macs) == 0 {
		return nil, fmt.Errorf("audit: keyring has no mac key")
	}
	return k, nil
}

// addPublic records id's public checkpoint key, read on line n. An id
// listed before with another key is refused, as a mac key id listed twice
// is: the later key would replace the earlier unseen, and every checkpoint
// the earlier one signed would then read as a bad signature. The same key
// again (a sign line and the verify line Keygen writes for it) is fine.
func (k *Keyring) addPublic(n int, id string, pub ed25519.PublicKey) error {
	if p, dup := k.publics[id]; dup && !p.Equal(pub) {
		return fmt.Errorf("audit: keyring line %d: checkpoint key %q appears twice with different keys", n, id)
	}
	k.publics[id] = pub
	return nil
}

// LoadKeyring reads a keyring file.
func LoadKeyring(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: keyring: %w", err)
	}
	return ParseKeyring(string(b))
}

// KeyringFromEnv parses the keyring in the environment variable EnvKeys,
// whose lines may also be separated by semicolons.
func KeyringFromEnv() (*Keyring, error) {
	v, ok := os.LookupEnv(EnvKeys)
	if !ok {
		return nil, fmt.Errorf("audit: %s is not set", EnvKeys)
	}
	return ParseKeyring(strings.ReplaceAll(v, ";", "\n"))
}

// Keygen writes a new keyring with one mac key and one sign key, with the
// given ids, from crypto/rand. Append the mac line of a new keyring to an
// existing one to rotate.
func Keygen(w io.Writer, macID, signID string) error {
	for _, id := range []string{macID, signID} {
		if err := racefree.CheckText("key id", id, MaxKeyIDLen); err != nil {
			return err
		}
	}
	mac, seed := make([]byte, 32), make([]byte, 32)
	_, _ = rand.Read(mac)
	_, _ = rand.Read(seed)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	enc := base64.StdEncoding.EncodeToString
	_, err := fmt.Fprintf(w, "# racefree audit keyring: keep it out of the database and out of version control.\n"+
		"mac %s %s\nsign %s %s\n# the public half, for a verifier that must not sign:\n# verify %s %s\n",
		macID, enc(mac), signID, enc(seed), signID, enc(pub))
	return err
}

// Current returns the id of the current mac key.
func (k *Keyring) Current() string { return k.current }

// Signer returns the id of the checkpoint signing key, or "" when the
// keyring holds none.
func (k *Keyring) Signer() string { return k.signer }

// scopeKey derives the HMAC key of scope under mac key id with HKDF-SHA256,
// so that a key of one scope says nothing about another's. ok is false
// when the keyring has no such key.
func (k *Keyring) scopeKey(id, scope string) (key []byte, ok bool) {
	secret, ok := k.macs[id]
	if !ok {
		return nil, false
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "racefree audit v1 scope "+scope, 32)
	if err != nil { // only for lengths out of range, which 32 is not
		panic(err)
	}
	return key, true
}

// String names the keyring's key ids, never its keys.
func (k *Keyring) String() string {
	return fmt.Sprintf("audit.Keyring{current: %q, signer: %q}", k.current, k.signer)
}

// GoString is String, so that %#v prints no key either.
func (k *Keyring) GoString() string { return k.String() }
