package server

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/roles"
)

// Warning is something /readyz reports while it answers 200 ready: the
// server works, but not as safely as it should. Code is stable.
type Warning struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// RoleNotJudged is the code of the warning JudgeRole leaves when it could
// not judge the role: unjudged is not safe.
const RoleNotJudged = "role-not-judged"

// roleDetail says what each code means, without names: /readyz answers
// anyone, and the log holds the path.
var roleDetail = map[string]string{
	roles.Superuser.Code():   "the database role racefree serves as is, or can become through its memberships, a superuser: row-level security does not bind it (the log names the path)",
	roles.BypassRLS.Code():   "the database role racefree serves as has BYPASSRLS, or can become a role that has it through its memberships: row-level security does not bind it (the log names the path)",
	roles.Owner.Code():       "the database role racefree serves as owns racefree's tables, or can act as their owner through its memberships: it can disable their row-level security (the log names the path)",
	roles.CreateRole.Code():  "the database role racefree serves as has CREATEROLE, or can become a role that has it through its memberships: it can create and grant roles, so row-level security is not proven to bind it (the log names the path)",
	roles.ServerFiles.Code(): "the database role racefree serves as has the rights of a predefined role that reaches the server's files or programs, itself or through its memberships: it reaches every tenant's rows there (the log names the path)",
	RoleNotJudged:            "the database role racefree serves as could not be judged: it may bypass row-level security (the log says why)",
}

// roleState is the latest judgement of the server's own role.
type roleState struct {
	mu       sync.Mutex
	warnings []Warning
	gauge    *prometheus.GaugeVec // racefree_role_findings{code}
}

func newRoleState(reg prometheus.Registerer) *roleState {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "racefree_role_findings",
		Help: "Ways the database role racefree serves as escapes row-level security, by code (role-is-superuser, role-bypasses-rls, role-owns-tables, role-creates-roles, role-reaches-server-files, role-not-judged), as of the last JudgeRole: itself or through a role it can become. PostgreSQL only; 0 is safe.",
	}, []string{"code"})
	reg.MustRegister(g)
	return &roleState{gauge: g}
}

// JudgeRole judges the database role the server logs in as (current_user)
// on PostgreSQL as `migrate up --app-role` judges the application role
// (internal/roles): a superuser, a role with BYPASSRLS or CREATEROLE, the
// owner of racefree's tables or a predefined role of the server's files
// or programs, itself or a role it can become by SET ROLE through its
// memberships (or, for the owner and the predefined roles, whose
// privileges it inherits). It
// returns each way, with its path in one line, for the log; /readyz then
// lists the codes as "warnings" (still 200: the server works, unsafely),
// and the gauge racefree_role_findings{code} counts them (0 for each code
// when the role is clean). On SQLite, which has no roles, it does nothing.
// An error leaves the warning role-not-judged. `racefree serve` calls it
// once at start.
func (s *Server) JudgeRole(ctx context.Context) ([]RoleFinding, error) {
	if s.db.Engine() != racefree.Postgres {
		return nil, nil
	}
	found, err := judgeOwnRole(ctx, s.db)
	codes := []string{}
	for _, f := range found {
		codes = append(codes, f.Code)
	}
	if err != nil {
		codes = append(codes, RoleNotJudged)
	}
	count := map[string]float64{}
	var ws []Warning
	for _, c := range codes {
		if count[c] == 0 {
			ws = append(ws, Warning{Code: c, Detail: roleDetail[c]})
		}
		count[c]++
	}
	s.role.mu.Lock()
	defer s.role.mu.Unlock()
	s.role.warnings = ws
	for _, k := range roles.Kinds {
		s.role.gauge.WithLabelValues(k.Code()).Set(count[k.Code()])
	}
	s.role.gauge.WithLabelValues(RoleNotJudged).Set(count[RoleNotJudged])
	return found, err
}

// RoleFinding is one way the server's database role escapes row-level
// security: its code, and the path in one line, e.g. `"app" can SET ROLE
// to "admins", which has BYPASSRLS (REVOKE "admins" FROM "app"; cuts it)`.
type RoleFinding struct {
	Code string
	Path string
}

// judgeOwnRole judges db's own role against the owners of racefree's
// tables.
func judgeOwnRole(ctx context.Context, db *racefree.DB) ([]RoleFinding, error) {
	var me string
	if err := db.SQL().QueryRowContext(ctx, `SELECT current_user`).Scan(&me); err != nil {
		return nil, fmt.Errorf("read current user: %w", err)
	}
	found, err := roles.JudgeRacefree(ctx, db.SQL(), me)
	if err != nil {
		return nil, err
	}
	var out []RoleFinding
	for _, f := range found {
		line := f.String()
		if fix := f.Revoke(); fix != "" {
			line += " (" + fix + " cuts it)"
		}
		out = append(out, RoleFinding{Code: f.Kind.Code(), Path: line})
	}
	return out, nil
}

// roleWarnings returns the warnings of the last JudgeRole.
func (s *Server) roleWarnings() []Warning {
	s.role.mu.Lock()
	defer s.role.mu.Unlock()
	return s.role.warnings
}
