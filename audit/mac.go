package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"

	"github.com/racefree/racefree/tenant"
)

// The first byte of every MAC input (and of a checkpoint's signed content)
// is a format version. A change to the encoding gets a new version, so that
// an old log still verifies.
//
// formatVersion is the encoding of the default tenant ([tenant.Default]),
// and so of every entry and checkpoint written before tenancy: no tenant
// field. tenantFormatVersion is the encoding of every other tenant: the
// tenant follows, length-prefixed, and then the same fields. So a chain
// written before tenancy verifies unchanged as the default tenant's, while
// an entry (or checkpoint) of one tenant no longer verifies under another:
// the tenant field differs, or one side has it and the other not, and the
// version bytes keep the two encodings from ever coinciding.
const (
	formatVersion       = 1
	tenantFormatVersion = 2
)

// appendVersion appends the format version of tenant t and, for a tenant
// other than the default, the tenant.
func appendVersion(buf []byte, t string) []byte {
	if t == tenant.Default {
		return append(buf, formatVersion)
	}
	buf = append(buf, tenantFormatVersion)
	return appendField(buf, []byte(t))
}

// entryInput is what an entry's MAC covers, besides the scope's key.
type entryInput struct {
	tenant  string
	scope   string
	seq     int64
	prev    []byte
	at      int64
	actor   string
	action  string
	subject string
	data    []byte
}

// appendField appends b with its length in front (a uvarint), so that no
// two different sequences of fields encode alike: moving a byte from one
// field to the next changes the lengths.
func appendField(buf, b []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(b)))
	return append(buf, b...)
}

// canonical appends the MAC input of e to buf: the version (and the
// tenant, for a tenant other than the default), then every field,
// length-prefixed; numbers as 8 bytes big-endian.
func canonical(buf []byte, e *entryInput) []byte {
	buf = appendVersion(buf, e.tenant)
	buf = appendField(buf, []byte(e.scope))
	buf = binary.BigEndian.AppendUint64(buf, uint64(e.seq))
	buf = appendField(buf, e.prev)
	buf = binary.BigEndian.AppendUint64(buf, uint64(e.at))
	buf = appendField(buf, []byte(e.actor))
	buf = appendField(buf, []byte(e.action))
	buf = appendField(buf, []byte(e.subject))
	buf = appendField(buf, e.data)
	return buf
}

// macer computes entry MACs under one scope key, reusing its buffers: the
// verifier computes one per row. The slice sum returns is valid until the
// next call.
type macer struct {
	h   hash.Hash
	buf []byte
	out []byte
}

func newMacer(key []byte) *macer { return &macer{h: hmac.New(sha256.New, key)} }

func (m *macer) sum(e *entryInput) []byte {
	m.buf = canonical(m.buf[:0], e)
	m.h.Reset()
	m.h.Write(m.buf)
	m.out = m.h.Sum(m.out[:0])
	return m.out
}
