package uniquecheck

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/pgparse"
	"github.com/racefree/racefree/internal/sqllex"
)

// Warning is something about a migration that the check alone cannot settle.
type Warning struct {
	Source  string // "line N" of the migration
	Message string
}

func (w Warning) String() string { return w.Source + ": " + w.Message }

// FromMigration finds every unique index or constraint a migration adds, in
// the order the file adds them: CREATE UNIQUE INDEX (with its expressions,
// collations, predicate and NULLS NOT DISTINCT), ALTER TABLE … ADD
// [CONSTRAINT …] UNIQUE or PRIMARY KEY (its NOT NULL is noted, not
// checked), and ALTER TABLE … ADD COLUMN … UNIQUE (checked as the column's
// generated expression or its DEFAULT, which every existing row receives;
// without either every row is NULL and nothing can collide). Key
// expressions and predicates are returned as the file wrote them. A unique
// index on a table the file creates is not checked (it has no rows yet),
// unless the file first copies existing rows into it (INSERT … SELECT …
// FROM), which is an InputError: the check cannot see them there; a copy
// into a table created with a UNIQUE constraint is a Warning. It warns
// when an earlier statement in the file rewrites a key or predicate
// column or changes the table's rows (in
// Spec.Notes, which Check copies to Report.Warnings), and returns as
// Warnings what concerns no checked index, such as a table the file creates.
//
// The file is parsed with PostgreSQL's own parser (libpg_query, run as
// WebAssembly in pure Go). For engine [racefree.SQLite], a file PostgreSQL
// cannot parse is split into statements, SQLite's `ident` and [ident]
// quoting and its schema-qualified index names (CREATE UNIQUE INDEX main.i
// ON t …) are rewritten, and each statement is parsed alone; a statement
// that still fails is skipped with a warning, unless it creates a unique
// index, which is an error. It does no I/O. The first call in a process
// spends a few seconds compiling the parser.
func FromMigration(engine, sqlText string) ([]Spec, []Warning, error) {
	d, err := dialectFor(engine)
	if err != nil {
		return nil, nil, err
	}
	m := newMigration(d)
	if err := m.file(sqlText, 0, sqlText); err == nil {
		return m.specs, m.warnings, nil
	} else if !isParseError(err) {
		return nil, nil, err
	} else if !d.reparse() {
		return nil, nil, racefree.Invalid("migration", "%v", err)
	}
	m = newMigration(d)
	for _, st := range splitStatements(sqlText) {
		text := sqliteToPostgres(st.text)
		src := lineOf(sqlText, st.offset)
		if err := m.file(text, st.offset, sqlText); err != nil {
			if !isParseError(err) {
				return nil, nil, err
			}
			if isUniqueIndex(text) {
				return nil, nil, racefree.Invalid("migration", "%s: cannot parse this CREATE UNIQUE INDEX: %v", src, err)
			}
			m.warn(src, "skipped a statement the parser does not understand (%v)", err)
		}
	}
	return m.specs, m.warnings, nil
}

func newMigration(d dialect) *migration {
	return &migration{d: d, rewrites: map[string][]rewrite{}, created: map[string]string{}, unique: map[string]bool{}, copied: map[string]string{}}
}

type parseError struct{ err error }

func (e *parseError) Error() string { return e.err.Error() }

func isParseError(err error) bool { _, ok := err.(*parseError); return ok }

type rewrite struct {
	source string
	what   string
	cols   []string // nil: the statement changes whole rows
}

type migration struct {
	d        dialect
	specs    []Spec
	warnings []Warning
	rewrites map[string][]rewrite // by table
	created  map[string]string    // table -> source of its CREATE TABLE
	unique   map[string]bool      // tables created with a UNIQUE constraint
	copied   map[string]string    // created table -> source of an INSERT that copies existing rows into it
}

// key names a table for matching statements on it (on SQLite the main
// schema is the default one: dialect.migrationTable).
func (m *migration) key(table string) string {
	return m.d.migrationTable(table)
}

func (m *migration) warn(src, format string, args ...any) {
	m.warnings = append(m.warnings, Warning{Source: src, Message: fmt.Sprintf(format, args...)})
}

// The parse tree, as libpg_query writes it in JSON: only the parts read here.
type (
	parseTree struct {
		Stmts []struct {
			Stmt map[string]json.RawMessage `json:"stmt"`
			Loc  int                        `json:"stmt_location"`
			Len  int                        `json:"stmt_len"`
		}
	}
	rangeVar  struct{ Schemaname, Relname string }
	strNode   struct{ String struct{ Sval string } }
	indexStmt struct {
		Idxname          string
		Relation         rangeVar
		IndexParams      []struct{ IndexElem indexElem }
		WhereClause      json.RawMessage
		Unique           bool
		NullsNotDistinct bool `json:"nulls_not_distinct"`
		IfNotExists      bool `json:"if_not_exists"`
	}
	indexElem struct {
		Name          string
		Expr          json.RawMessage
		Collation     []strNode
		Opclass       []strNode
		Opclassopts   []json.RawMessage
		Ordering      string
		NullsOrdering string `json:"nulls_ordering"`
	}
	constraint struct {
		Contype          string
		Conname          string
		Indexname        string
		Keys             []strNode
		NullsNotDistinct bool            `json:"nulls_not_distinct"`
		RawExpr          json.RawMessage `json:"raw_expr"`
		Location         int
	}
	columnDef struct {
		Colname     string
		TypeName    struct{ Names []strNode }
		Constraints []struct{ Constraint constraint }
	}
	alterTableStmt struct {
		Relation rangeVar
		Cmds     []struct {
			AlterTableCmd struct {
				Subtype string
				Name    string
				Def     struct {
					Constraint *constraint
					ColumnDef  *columnDef
				}
			}
		}
	}
	updateStmt struct {
		Relation   rangeVar
		TargetList []struct{ ResTarget struct{ Name string } }
	}
	relStmt    struct{ Relation rangeVar }
	insertStmt struct {
		Relation   rangeVar
		SelectStmt struct {
			SelectStmt *struct {
				FromClause []json.RawMessage
				Larg, Rarg json.RawMessage
			}
		}
	}
	createStmt struct {
		Relation  rangeVar
		TableElts []struct {
			ColumnDef  *columnDef
			Constraint *constraint
		}
	}
	truncateStmt struct{ Relations []struct{ RangeVar rangeVar } }
	renameStmt   struct {
		RenameType string
		Relation   rangeVar
		Subname    string
		Newname    string
	}
)

func (r rangeVar) name() string { return Name{Schema: r.Schemaname, Table: r.Relname}.String() }

// file parses text (which starts at offset base of the whole migration, for
// line numbers) and reads each statement.
func (m *migration) file(text string, base int, whole string) error {
	js, err := pgparse.ToJSON(text)
	if err != nil {
		return &parseError{err}
	}
	var tree parseTree
	if err := json.Unmarshal([]byte(js), &tree); err != nil {
		return fmt.Errorf("parse tree: %w", err)
	}
	for _, st := range tree.Stmts {
		end := len(text)
		if st.Len > 0 {
			end = st.Loc + st.Len
		}
		s := stmt{text: text, start: st.Loc, end: end}
		src := lineOf(whole, base+st.Loc)
		for kind, raw := range st.Stmt {
			if err := m.statement(kind, raw, s, src); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *migration) statement(kind string, raw json.RawMessage, s stmt, src string) error {
	switch kind {
	case "IndexStmt":
		var st indexStmt
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		if !st.Unique {
			return nil
		}
		spec := Spec{Table: st.Relation.name(), NullsNotDistinct: st.NullsNotDistinct, IndexName: st.Idxname, IfNotExists: st.IfNotExists, Source: src}
		elems, where, err := s.indexParts()
		if err != nil || len(elems) != len(st.IndexParams) {
			return racefree.Invalid("migration", "%s: cannot find the key list of this index (%v)", src, err)
		}
		cols := map[string]bool{}
		for i, p := range st.IndexParams {
			el := p.IndexElem
			toks := elems[i]
			if el.NullsOrdering != "" && el.NullsOrdering != "SORTBY_NULLS_DEFAULT" {
				toks = toks[:len(toks)-2]
			}
			if el.Ordering != "" && el.Ordering != "SORTBY_DEFAULT" {
				toks = toks[:len(toks)-1]
			}
			if len(el.Opclassopts) > 0 {
				toks = dropParens(toks)
			}
			if n := len(el.Opclass); n > 0 {
				toks = toks[:len(toks)-(2*n-1)]
			}
			if len(toks) == 0 {
				return racefree.Invalid("migration", "%s: empty index key", src)
			}
			spec.Keys = append(spec.Keys, s.text[toks[0].start:toks[len(toks)-1].end])
			if el.Name != "" {
				cols[el.Name] = true
			}
			columnRefs(el.Expr, cols)
		}
		if st.WhereClause != nil {
			spec.Where = where
			columnRefs(st.WhereClause, cols)
		}
		return m.add(spec, cols)
	case "AlterTableStmt":
		var st alterTableStmt
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		table := st.Relation.name()
		for _, c := range st.Cmds {
			cmd := c.AlterTableCmd
			switch cmd.Subtype {
			case "AT_AddConstraint":
				if cmd.Def.Constraint != nil {
					if err := m.constraint(*cmd.Def.Constraint, table, src); err != nil {
						return err
					}
				}
			case "AT_AddColumn":
				if cmd.Def.ColumnDef != nil {
					if err := m.addColumn(*cmd.Def.ColumnDef, table, s, src); err != nil {
						return err
					}
				}
			case "AT_AlterColumnType":
				m.rewrites[m.key(table)] = append(m.rewrites[m.key(table)], rewrite{src, "changes the type of column " + cmd.Name, []string{cmd.Name}})
			case "AT_DropColumn":
				m.rewrites[m.key(table)] = append(m.rewrites[m.key(table)], rewrite{src, "drops column " + cmd.Name, []string{cmd.Name}})
			}
		}
	case "UpdateStmt":
		var st updateStmt
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		var cols []string
		for _, t := range st.TargetList {
			cols = append(cols, t.ResTarget.Name)
		}
		t := st.Relation.name()
		m.rewrites[m.key(t)] = append(m.rewrites[m.key(t)], rewrite{src, "updates " + strings.Join(cols, ", "), cols})
	case "DeleteStmt":
		var st relStmt
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		t := st.Relation.name()
		m.rewrites[m.key(t)] = append(m.rewrites[m.key(t)], rewrite{src, "deletes rows of", nil})
	case "InsertStmt":
		var st insertStmt
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		t := st.Relation.name()
		m.rewrites[m.key(t)] = append(m.rewrites[m.key(t)], rewrite{src, "inserts rows into", nil})
		if sel := st.SelectStmt.SelectStmt; sel != nil && (len(sel.FromClause) > 0 || sel.Larg != nil) {
			// INSERT … SELECT … FROM copies rows of the database, which
			// the check of the file cannot see in the table it creates.
			if _, ok := m.created[m.key(t)]; ok {
				if m.unique[m.key(t)] {
					m.warn(src, "copies existing rows into %s, which this migration creates with a UNIQUE constraint (%s): not checked; the copy fails on duplicates of its keys in the source rows, which --table and --key can check", t, m.created[m.key(t)])
				}
				if _, ok := m.copied[m.key(t)]; !ok {
					m.copied[m.key(t)] = src
				}
			}
		}
	case "TruncateStmt":
		var st truncateStmt
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		for _, r := range st.Relations {
			t := r.RangeVar.name()
			m.rewrites[m.key(t)] = append(m.rewrites[m.key(t)], rewrite{src, "truncates", nil})
		}
	case "RenameStmt":
		var st renameStmt
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		if st.RenameType == "OBJECT_COLUMN" {
			t := st.Relation.name()
			m.rewrites[m.key(t)] = append(m.rewrites[m.key(t)], rewrite{src, "renames column " + st.Subname + " to " + st.Newname, []string{st.Subname, st.Newname}})
		}
	case "CreateStmt":
		var st createStmt
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		t := m.key(st.Relation.name())
		m.created[t] = src
		delete(m.copied, t)
		m.unique[t] = false
		for _, el := range st.TableElts {
			if el.Constraint != nil && el.Constraint.Contype == "CONSTR_UNIQUE" {
				m.unique[t] = true
			}
			if el.ColumnDef != nil {
				for _, c := range el.ColumnDef.Constraints {
					if c.Constraint.Contype == "CONSTR_UNIQUE" {
						m.unique[t] = true
					}
				}
			}
		}
	}
	return nil
}

// constraint reads ADD [CONSTRAINT …] UNIQUE or PRIMARY KEY. A primary key
// is checked as the unique index it builds and the NOT NULL it sets on its
// columns (Spec.NotNull).
func (m *migration) constraint(con constraint, table, src string) error {
	kind := map[string]string{"CONSTR_UNIQUE": "UNIQUE", "CONSTR_PRIMARY": "PRIMARY KEY"}[con.Contype]
	if kind == "" {
		return nil
	}
	if con.Indexname != "" && kind == "PRIMARY KEY" {
		m.warn(src, "%s USING INDEX %s: the existing index already decides uniqueness; the NOT NULL it sets on the index's columns is not checked (a NULL there fails the migration)", kind, con.Indexname)
		return nil
	}
	if con.Indexname != "" {
		m.warn(src, "%s USING INDEX %s: the existing index already decides; nothing to check", kind, con.Indexname)
		return nil
	}
	spec := Spec{Table: table, NullsNotDistinct: con.NullsNotDistinct, NotNull: kind == "PRIMARY KEY", IndexName: con.Conname, Source: src}
	cols := map[string]bool{}
	for _, k := range con.Keys {
		spec.Keys = append(spec.Keys, Name{Table: k.String.Sval}.String())
		cols[k.String.Sval] = true
	}
	return m.add(spec, cols)
}

func (m *migration) addColumn(col columnDef, table string, s stmt, src string) error {
	var unique, nnd, notNull, numbered bool
	var def, gen *constraint
	var bounds []int
	what := "UNIQUE"
	for _, c := range col.Constraints {
		con := c.Constraint
		bounds = append(bounds, con.Location)
		switch con.Contype {
		case "CONSTR_UNIQUE":
			unique, nnd = true, con.NullsNotDistinct
		case "CONSTR_PRIMARY":
			unique, notNull, what = true, true, "PRIMARY KEY"
		case "CONSTR_NOTNULL":
			notNull = true
		case "CONSTR_DEFAULT":
			def = &c.Constraint
		case "CONSTR_GENERATED":
			gen = &c.Constraint
		case "CONSTR_IDENTITY":
			numbered = true
		}
	}
	if !unique {
		return nil
	}
	if n := len(col.TypeName.Names); n > 0 && serialTypes[col.TypeName.Names[n-1].String.Sval] {
		numbered = true
	}
	if numbered {
		// An identity or serial column: every existing row gets the next
		// value of its own sequence, distinct and never NULL.
		m.warn(src, "ADD COLUMN %s %s: an identity or serial column numbers every existing row from its sequence, so no two collide; nothing to check", col.Colname, what)
		return nil
	}
	if gen != nil {
		// GENERATED ALWAYS AS (expr) STORED: every existing row gets expr
		// computed from its own columns.
		expr := s.generatedExpr(gen.Location)
		if expr == "" {
			return racefree.Invalid("migration", "%s: ADD COLUMN %s %s: cannot find the text of its generated expression", src, col.Colname, what)
		}
		cols := map[string]bool{}
		columnRefs(gen.RawExpr, cols)
		return m.add(Spec{Table: table, Keys: []string{expr}, NullsNotDistinct: nnd, NotNull: notNull, Source: src,
			Notes: []string{fmt.Sprintf("ADD COLUMN %s %s: checked as its generated expression %s, computed for every existing row", col.Colname, what, expr)}}, cols)
	}
	if def == nil && (nnd || notNull) {
		// Every existing row gets NULL: NULLS NOT DISTINCT makes them
		// equal, so any two rows collide, and NOT NULL refuses each; the
		// constant NULL as the key finds both.
		why := "its NULLs are equal: checked as the constant NULL, so any two rows collide"
		if notNull {
			why = "which NOT NULL refuses: checked as the constant NULL, so any existing row fails the migration"
		}
		return m.add(Spec{Table: table, Keys: []string{"NULL"}, NullsNotDistinct: nnd, NotNull: notNull, Source: src,
			Notes: []string{fmt.Sprintf("ADD COLUMN %s %s without a DEFAULT: every existing row gets NULL, %s", col.Colname, what, why)}}, map[string]bool{})
	}
	if def == nil {
		m.warn(src, "ADD COLUMN %s UNIQUE: every existing row gets NULL, so no two collide; nothing to check", col.Colname)
		return nil
	}
	expr := s.defaultExpr(def.Location, bounds)
	if expr == "" {
		m.warn(src, "ADD COLUMN %s %s: cannot find the text of its DEFAULT; not checked", col.Colname, what)
		return nil
	}
	cols := map[string]bool{}
	columnRefs(def.RawExpr, cols)
	return m.add(Spec{Table: table, Keys: []string{expr}, NullsNotDistinct: nnd, NotNull: notNull, Source: src,
		Notes: []string{fmt.Sprintf("ADD COLUMN %s %s: checked as its DEFAULT %s, the value every existing row receives", col.Colname, what, expr)}}, cols)
}

// serialTypes are the type names that make a column an integer with a
// sequence's nextval() as its DEFAULT (written by PostgreSQL when it
// creates the column, so not in the parse tree).
var serialTypes = map[string]bool{"serial": true, "bigserial": true, "smallserial": true, "serial2": true, "serial4": true, "serial8": true}

// add records spec, unless its table is created in this file, with notes
// about earlier statements that change what the check reads. A table the
// file creates and then fills with existing rows (INSERT … SELECT … FROM)
// is an InputError: the check cannot see the rows the index will meet.
func (m *migration) add(spec Spec, cols map[string]bool) error {
	if at, ok := m.created[m.key(spec.Table)]; ok {
		if from, ok := m.copied[m.key(spec.Table)]; ok {
			return racefree.Invalid("migration", "%s: %s is created by this migration (%s) and filled with existing rows (%s) before this unique index: the check cannot see those rows there; check the source table's keys with --table and --key", spec.Source, spec.Table, at, from)
		}
		m.warn(spec.Source, "%s is created by this migration (%s): it has no rows yet; nothing to check", spec.Table, at)
		return nil
	}
	for _, rw := range m.rewrites[m.key(spec.Table)] {
		if rw.cols == nil {
			spec.Notes = append(spec.Notes, fmt.Sprintf("%s %s %s before this index is built: the check sees the rows as they are now", rw.source, rw.what, spec.Table))
			continue
		}
		for _, c := range rw.cols {
			if cols[c] {
				spec.Notes = append(spec.Notes, fmt.Sprintf("%s %s, a column of this index, before the index is built: the check sees the values as they are now", rw.source, rw.what))
				break
			}
		}
	}
	m.specs = append(m.specs, spec)
	return nil
}

// columnRefs adds the last name of every column reference in the JSON parse
// tree raw to out.
func columnRefs(raw json.RawMessage, out map[string]bool) {
	if len(raw) == 0 {
		return
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if cr, ok := v["ColumnRef"].(map[string]any); ok {
				if fields, ok := cr["fields"].([]any); ok && len(fields) > 0 {
					if s, ok := fields[len(fields)-1].(map[string]any)["String"].(map[string]any); ok {
						if name, ok := s["sval"].(string); ok {
							out[name] = true
						}
					}
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
}

// lineOf returns "line N", the line of text on which the statement that
// starts at offset has its first token: a statement's location is where
// the previous one ended, so white space, comments and semicolons are
// skipped (read as PostgreSQL reads them, internal/sqllex).
func lineOf(text string, offset int) string {
	offset = min(max(offset, 0), len(text))
	for {
		t, ok := sqllex.Next(sqllex.Postgres, text, offset)
		if !ok {
			offset = len(text)
			break
		}
		if t.Text != ";" {
			offset = t.Start
			break
		}
		offset = t.End
	}
	return fmt.Sprintf("line %d", strings.Count(text[:offset], "\n")+1)
}

type statement struct {
	text   string
	offset int
}

// splitStatements splits SQLite SQL on the semicolons outside quotes,
// brackets and comments. (A CREATE TRIGGER body is split too; its pieces
// are skipped with a warning.)
func splitStatements(s string) []statement {
	var out []statement
	start := 0
	for _, t := range sqllex.Tokens(sqllex.SQLite, s) {
		if t.Kind == sqllex.Punct && t.Text == ";" {
			out = append(out, statement{s[start:t.Start], start})
			start = t.End
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, statement{s[start:], start})
	}
	return out
}

// sqliteToPostgres rewrites the SQLite spellings PostgreSQL's parser does
// not accept: `ident` and [ident] become "ident", and the schema moves from
// a unique index's name to its table (SQLite's CREATE UNIQUE INDEX s.i ON t
// builds i on s.t).
func sqliteToPostgres(s string) string {
	var b strings.Builder
	done := 0
	for _, t := range sqllex.Tokens(sqllex.SQLite, s) {
		if t.Kind != sqllex.Quoted || strings.IndexByte("`[", t.Text[0]) < 0 {
			continue
		}
		name := t.Text[1:]
		if t.Text[0] == '[' {
			name = strings.TrimSuffix(name, "]")
		} else {
			// A closed name ends in its one closing quote after
			// pairs of doubled ones; an open one (to the end of the
			// text) holds pairs only.
			if strings.Count(name, "`")%2 == 1 {
				name = name[:len(name)-1]
			}
			name = strings.ReplaceAll(name, "``", "`")
		}
		b.WriteString(s[done:t.Start])
		b.WriteString(`"` + strings.ReplaceAll(name, `"`, `""`) + `"`)
		done = t.End
	}
	b.WriteString(s[done:])
	out := b.String()
	f := strings.Fields(out)
	// CREATE UNIQUE INDEX [IF NOT EXISTS] schema.name ON table
	i := 3
	if len(f) > 6 && strings.EqualFold(f[3], "IF") {
		i = 6
	}
	if isUniqueIndex(out) && len(f) > i+2 && strings.EqualFold(f[i+1], "ON") && strings.Count(f[i], ".") == 1 && !strings.Contains(f[i+2], ".") {
		schema, name, _ := strings.Cut(f[i], ".")
		f[i] = name
		f[i+2] = schema + "." + f[i+2]
		return strings.Join(f, " ")
	}
	return out
}

func isUniqueIndex(s string) bool {
	f := strings.Fields(strings.ToUpper(s))
	return len(f) >= 3 && f[0] == "CREATE" && f[1] == "UNIQUE" && f[2] == "INDEX"
}
