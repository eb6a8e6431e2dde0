package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// formatVersion is the first field of every MAC input. A change to the
// encoding gets a new version, so that an old log still verifies.
const formatVersion = 1

// entryInput is what an entry's MAC covers, besides the scope's key.
type entryInput struct {
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

// canonical appends the MAC input of e to buf: the version, then every
// field, length-prefixed; numbers as 8 bytes big-endian.
func canonical(buf []byte, e *entryInput) []byte {
	buf = append(buf, formatVersion)
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
