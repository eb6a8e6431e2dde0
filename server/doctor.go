package server

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/racefree/racefree/doctor"
)

// DoctorNotRun is the code Doctor leaves on /readyz and in
// racefree_doctor_findings when the check itself failed: not checked is
// not safe.
const DoctorNotRun = "doctor-not-run"

// DoctorFinding is what /readyz shows of a doctor finding: its stable code
// and severity, and nothing that names a role or a table (anyone may call
// /readyz; the log holds the detail).
type DoctorFinding struct {
	Code     string          `json:"code"`
	Severity doctor.Severity `json:"severity"`
}

// doctorState is the latest report of Doctor.
type doctorState struct {
	mu       sync.Mutex
	ran      bool
	findings []DoctorFinding
	gauge    *prometheus.GaugeVec // racefree_doctor_findings{code}
}

func newDoctorState(reg prometheus.Registerer) *doctorState {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "racefree_doctor_findings",
		Help: "Findings of racefree doctor (package doctor) as of the last check serve made, by code: durability, replication, role, row-level security, schema, statistics, pooler and SQLite journal. Each code the engine can report is present, 0 when not found; doctor-not-run 1 when the check failed.",
	}, []string{"code"})
	reg.MustRegister(g)
	return &doctorState{gauge: g}
}

// Doctor runs [doctor.Check] on the server's database as the role it
// serves as, bounded by ctx, and keeps the report: /readyz then lists each
// finding's code and severity under "doctor" (still 200: the server
// works, less safely than it should), and the gauge
// racefree_doctor_findings{code} counts them (0 for every code the engine
// can report and that was not found). An error leaves doctor-not-run. It
// returns the report, with details, for the log. `racefree serve` calls
// it once at start.
func (s *Server) Doctor(ctx context.Context) (doctor.Report, error) {
	rep, err := doctor.Check(ctx, s.db, doctor.Options{})
	count := map[string]float64{}
	var fs []DoctorFinding
	for _, f := range rep.Findings {
		if count[f.Code] == 0 {
			fs = append(fs, DoctorFinding{Code: f.Code, Severity: f.Severity})
		}
		count[f.Code]++
	}
	if err != nil {
		fs = append(fs, DoctorFinding{Code: DoctorNotRun, Severity: doctor.Warn})
		count[DoctorNotRun] = 1
	}
	s.doctor.mu.Lock()
	defer s.doctor.mu.Unlock()
	s.doctor.ran, s.doctor.findings = true, fs
	for _, c := range doctor.Codes(s.db.Engine()) {
		s.doctor.gauge.WithLabelValues(c).Set(count[c])
	}
	s.doctor.gauge.WithLabelValues(DoctorNotRun).Set(count[DoctorNotRun])
	return rep, err
}

// doctorFindings returns the findings of the last Doctor, and whether it
// ran.
func (s *Server) doctorFindings() ([]DoctorFinding, bool) {
	s.doctor.mu.Lock()
	defer s.doctor.mu.Unlock()
	return s.doctor.findings, s.doctor.ran
}
