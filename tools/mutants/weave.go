package main

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A mutant of Go function bodies needs no build of its own either. Before
// the prebuilt test binaries are built (see overlay.go), every such mutant
// is woven into the unmutated copy: each function it changes keeps its
// original body, which first asks whether this mutant is the one switched
// on (weaveEnv names it at run time) and if so calls the mutant's version
// of the function, appended to the same file under another name. With no
// mutant switched on the binaries run the original code, line for line
// (the switch is written on the line of the body's opening brace); with
// one switched on they run that mutant's functions in place of the
// originals.
//
// Only a mutant whose every change is inside the bodies of top-level
// functions (not init) of non-test .go files is woven; anything else (a
// changed type, constant, variable, import or signature) is built as
// before. A woven mutant's catch must also hold up without the mutant: the
// tests that caught it are run again in the same binaries with no mutant
// switched on, and a test that fails there too (one that reads the source
// files, say) is no evidence. Anything short of a confirmed catch is
// judged again by building the mutated tree, so weaving can save time but
// never change a verdict.
const (
	weaveEnv = "RACEFREE_MUTANT_GO" // names the woven mutant to switch on
	weaveVar = "racefreeMutantGo"   // the package-level variable the switches read
	// weaveFile holds weaveVar in each package with woven functions.
	weaveFile = "zz_racefree_mutant_go.go"
)

// A weaving is the set of Go mutants woven into a copy of the repository.
type weaving struct {
	root  string             // the repository
	base  string             // the copy the mutants are woven into
	ids   map[*mutant]string // woven mutant → the value of weaveEnv that switches it on
	files map[string]*wovenFile
	mids  map[string][]*mutant // file → the mutants woven into it
	spans map[string][]span    // file → the lines of its mutants' functions
}

// A span is the lines a woven mutant's version of a function has in its
// file, as the //line comment above it tells the compiler.
type span struct {
	m        *mutant
	from, to int
}

// A wovenFile is one .go file of the copy with mutants woven in.
type wovenFile struct {
	src   []byte
	fset  *token.FileSet
	ast   *ast.File
	decls map[int]*wovenFunc // index in ast.Decls → the function's switches
	tail  bytes.Buffer       // the mutants' versions of functions, appended to the file
}

// A wovenFunc is one original function whose body switches to mutants.
type wovenFunc struct {
	renames  []edit   // names given to unnamed or blank parameters, so the switch can pass them on
	switches []string // one `if …` statement per mutant
}

// An edit replaces src[from:to] with text.
type edit struct {
	from, to int
	text     string
}

// weave weaves every mutant of Go function bodies among ms into the copy
// base of root, writes the copy's files, and returns the weaving. A mutant
// it cannot weave is left out (it will be built). When the woven copy does
// not build, the mutants woven into the files the errors name are left out
// and the rest woven again, until it builds.
func weave(ctx context.Context, rn *runner, base string, ms []*mutant) (*weaving, error) {
	w := &weaving{root: rn.root, base: base}
	out := map[*mutant]bool{}
	written := map[string]bool{} // files of the copy that hold woven text
	for attempt := 0; ; attempt++ {
		w.ids, w.files, w.mids, w.spans = map[*mutant]string{}, map[string]*wovenFile{}, map[string][]*mutant{}, map[string][]span{}
		for _, m := range ms {
			if out[m] {
				continue
			}
			if err := w.add(ctx, m); err != nil {
				if attempt == 0 {
					rn.debugf("%s: not woven: %v", m.file, err)
				}
				w.forget(m)
			}
		}
		if err := w.write(written); err != nil {
			return nil, err
		}
		if len(w.ids) == 0 {
			return w, nil
		}
		var buf bytes.Buffer
		err := command(ctx, base, &buf, rn.env, "go", "build", "-tags", overlayTag, "./...")
		if err == nil {
			return w, nil
		}
		if ctx.Err() != nil || attempt == 5 {
			return nil, fmt.Errorf("the woven copy does not build: %v\n%s", err, buf.Bytes())
		}
		bad := w.blame(buf.String())
		if len(bad) == 0 {
			bad = w.all()
		}
		for _, m := range bad {
			rn.debugf("%s: not woven: the woven copy does not build with it", m.file)
			out[m] = true
		}
	}
}

// forget removes what a failed add of m left in w: add plans every file
// before it changes any, so only files it read remain, unchanged.
func (w *weaving) forget(m *mutant) {
	for _, f := range m.touched {
		if wf := w.files[f]; wf != nil && len(wf.decls) == 0 {
			delete(w.files, f)
		}
	}
}

// add weaves m into w if every change it makes is inside function bodies.
func (w *weaving) add(ctx context.Context, m *mutant) error {
	if len(m.touched) == 0 {
		return fmt.Errorf("no files")
	}
	for _, f := range m.touched {
		if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
			return fmt.Errorf("%s is not a non-test .go file", f)
		}
	}
	mutated, err := patched(ctx, w.root, m)
	if err != nil {
		return err
	}
	id := fmt.Sprint(len(w.ids) + 1)
	// Plan every file first: a mutant is woven whole or not at all.
	type plan struct {
		file  string
		wf    *wovenFile
		funcs []int // decl indexes
		mf    *ast.File
		msrc  []byte
		mset  *token.FileSet
	}
	var plans []plan
	for _, f := range m.touched {
		wf, err := w.file(f)
		if err != nil {
			return err
		}
		msrc := mutated[f]
		mset := token.NewFileSet()
		mf, err := parser.ParseFile(mset, f, msrc, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("%s: %v", f, err)
		}
		funcs, err := changedBodies(wf, mf, msrc, mset)
		if err != nil {
			return fmt.Errorf("%s: %v", f, err)
		}
		plans = append(plans, plan{f, wf, funcs, mf, msrc, mset})
	}
	changed := 0
	for _, p := range plans {
		changed += len(p.funcs)
	}
	if changed == 0 {
		return fmt.Errorf("no function body changes")
	}
	for _, p := range plans {
		for _, i := range p.funcs {
			orig := p.wf.ast.Decls[i].(*ast.FuncDecl)
			mut := p.mf.Decls[i].(*ast.FuncDecl)
			wfn := p.wf.decls[i]
			if wfn == nil {
				wfn = &wovenFunc{}
				wfn.renames = paramNames(p.wf, orig)
				p.wf.decls[i] = wfn
			}
			alt := orig.Name.Name + "__racefree_mutant_" + id
			wfn.switches = append(wfn.switches, switchStmt(p.wf, orig, id, alt))
			line := p.mset.Position(mut.Pos()).Line
			w.spans[p.file] = append(w.spans[p.file], span{m, line, p.mset.Position(mut.End()).Line})
			from, to := p.mset.Position(mut.Pos()).Offset, p.mset.Position(mut.End()).Offset
			name := p.mset.Position(mut.Name.Pos()).Offset
			fmt.Fprintf(&p.wf.tail, "\n//line %s:%d\n%s%s%s\n", path.Base(p.file), line,
				p.msrc[from:name], alt, p.msrc[name+len(mut.Name.Name):to])
		}
		w.mids[p.file] = append(w.mids[p.file], m)
	}
	w.ids[m] = id
	return nil
}

// file returns the woven state of the repository's file f, reading it the
// first time.
func (w *weaving) file(f string) (*wovenFile, error) {
	if wf := w.files[f]; wf != nil {
		return wf, nil
	}
	src, err := os.ReadFile(filepath.Join(w.root, filepath.FromSlash(f)))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	wf := &wovenFile{src: src, fset: fset, ast: af, decls: map[int]*wovenFunc{}}
	w.files[f] = wf
	return wf, nil
}

// patched returns the text of each file m touches, with m applied (to
// copies of them: the repository stays as it is).
func patched(ctx context.Context, root string, m *mutant) (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "mutant-go-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := copyFiles(root, dir, m.touched); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := command(ctx, dir, &out, nil, "git", "apply", "--whitespace=nowarn", m.path); err != nil {
		return nil, fmt.Errorf("the patch does not apply: %v\n%s", err, out.Bytes())
	}
	texts := map[string][]byte{}
	for _, f := range m.touched {
		if texts[f], err = os.ReadFile(filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			return nil, err
		}
	}
	return texts, nil
}

// changedBodies returns the indexes of the declarations whose function
// bodies the mutated file mf changes, or an error if it changes anything
// else: the package clause, another declaration, a function's signature,
// or init.
func changedBodies(wf *wovenFile, mf *ast.File, msrc []byte, mset *token.FileSet) ([]int, error) {
	if mf.Name.Name != wf.ast.Name.Name {
		return nil, fmt.Errorf("the package clause changes")
	}
	if len(mf.Decls) != len(wf.ast.Decls) {
		return nil, fmt.Errorf("a declaration is added or removed")
	}
	text := func(src []byte, set *token.FileSet, from, to token.Pos) string {
		return string(src[set.Position(from).Offset:set.Position(to).Offset])
	}
	var changed []int
	for i, od := range wf.ast.Decls {
		md := mf.Decls[i]
		if text(wf.src, wf.fset, od.Pos(), od.End()) == text(msrc, mset, md.Pos(), md.End()) {
			continue
		}
		of, ok1 := od.(*ast.FuncDecl)
		mfn, ok2 := md.(*ast.FuncDecl)
		switch {
		case !ok1 || !ok2:
			return nil, fmt.Errorf("a declaration other than a function changes")
		case of.Body == nil || mfn.Body == nil:
			return nil, fmt.Errorf("a function without a body changes")
		case of.Recv == nil && of.Name.Name == "init":
			return nil, fmt.Errorf("init changes")
		case text(wf.src, wf.fset, of.Pos(), of.Body.Lbrace) != text(msrc, mset, mfn.Pos(), mfn.Body.Lbrace):
			return nil, fmt.Errorf("the signature of %s changes", of.Name.Name)
		}
		changed = append(changed, i)
	}
	return changed, nil
}

// paramNames names fn's unnamed and blank receiver and parameters (r__0,
// p__1, …) so that its switch can pass them on; it returns the edits that
// do so and records the names in the AST for switchStmt.
func paramNames(wf *wovenFile, fn *ast.FuncDecl) []edit {
	var edits []edit
	n := 0
	name := func(fields *ast.FieldList, prefix string) {
		if fields == nil {
			return
		}
		for _, field := range fields.List {
			if len(field.Names) == 0 {
				id := fmt.Sprintf("%s__%d", prefix, n)
				n++
				at := wf.fset.Position(field.Type.Pos()).Offset
				edits = append(edits, edit{at, at, id + " "})
				field.Names = []*ast.Ident{ast.NewIdent(id)}
				continue
			}
			for i, nm := range field.Names {
				if nm.Name == "_" {
					id := fmt.Sprintf("%s__%d", prefix, n)
					n++
					at := wf.fset.Position(nm.Pos()).Offset
					edits = append(edits, edit{at, at + 1, id})
					field.Names[i] = ast.NewIdent(id)
				}
			}
		}
	}
	name(fn.Recv, "r")
	name(fn.Type.Params, "p")
	return edits
}

// switchStmt is the statement at the top of fn's body that calls alt, the
// mutant id's version of fn, when that mutant is switched on.
func switchStmt(wf *wovenFile, fn *ast.FuncDecl, id, alt string) string {
	var args []string
	variadic := false
	for _, field := range fn.Type.Params.List {
		_, variadic = field.Type.(*ast.Ellipsis)
		for _, nm := range field.Names {
			args = append(args, nm.Name)
		}
	}
	call := alt
	if fn.Recv != nil {
		call = fn.Recv.List[0].Names[0].Name + "." + alt
	} else if fn.Type.TypeParams != nil {
		var tps []string
		for _, field := range fn.Type.TypeParams.List {
			for _, nm := range field.Names {
				tps = append(tps, nm.Name)
			}
		}
		call += "[" + strings.Join(tps, ", ") + "]"
	}
	call += "(" + strings.Join(args, ", ")
	if variadic {
		call += "..."
	}
	call += ")"
	if fn.Type.Results != nil && len(fn.Type.Results.List) > 0 {
		return fmt.Sprintf("if %s == %q { return %s }; ", weaveVar, id, call)
	}
	return fmt.Sprintf("if %s == %q { %s; return }; ", weaveVar, id, call)
}

// write writes every woven file, and each of their packages' weaveFile,
// into the copy; the files of written that are no longer woven get their
// original text back (and weaveFile goes), and written is updated.
func (w *weaving) write(written map[string]bool) error {
	for f := range written {
		if wf := w.files[f]; wf != nil && len(wf.decls) > 0 {
			continue
		}
		src, err := os.ReadFile(filepath.Join(w.root, filepath.FromSlash(f)))
		if err == nil {
			err = os.WriteFile(filepath.Join(w.base, filepath.FromSlash(f)), src, 0o644)
		}
		if err != nil {
			return err
		}
		os.Remove(filepath.Join(w.base, filepath.FromSlash(path.Dir(f)), weaveFile))
		delete(written, f)
	}
	pkgs := map[string]string{} // directory → package name
	for f, wf := range w.files {
		dst := filepath.Join(w.base, filepath.FromSlash(f))
		if len(wf.decls) == 0 {
			continue
		}
		written[f] = true
		var edits []edit
		for i, fn := range wf.decls {
			edits = append(edits, fn.renames...)
			at := wf.fset.Position(wf.ast.Decls[i].(*ast.FuncDecl).Body.Lbrace).Offset + 1
			edits = append(edits, edit{at, at, strings.Join(fn.switches, "")})
		}
		slices.SortFunc(edits, func(a, b edit) int { return b.from - a.from })
		src := slices.Clone(wf.src)
		for _, e := range edits {
			src = slices.Concat(src[:e.from], []byte(e.text), src[e.to:])
		}
		src = append(src, wf.tail.Bytes()...)
		if err := os.WriteFile(dst, src, 0o644); err != nil {
			return err
		}
		pkgs[path.Dir(f)] = wf.ast.Name.Name
	}
	for dir, name := range pkgs {
		text := fmt.Sprintf("package %s\n\nimport \"os\"\n\n// %s names the woven mutant switched on (see the runner's weave.go).\nvar %s = os.Getenv(%q)\n", name, weaveVar, weaveVar, weaveEnv)
		if err := os.WriteFile(filepath.Join(w.base, filepath.FromSlash(dir), weaveFile), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// errorAt matches a compiler error's file name and line in go build's output.
var errorAt = regexp.MustCompile(`(?m)^(?:\./)?([^\s:]+\.go):(\d+)`)

// blame returns the woven mutants that go build's errors point at: those
// whose version of a function covers the line of an error, or, for an
// error elsewhere in a woven file, every mutant woven into it.
func (w *weaving) blame(out string) []*mutant {
	var bad []*mutant
	blame := func(m *mutant) {
		if !slices.Contains(bad, m) {
			bad = append(bad, m)
		}
	}
	for _, match := range errorAt.FindAllStringSubmatch(out, -1) {
		line, _ := strconv.Atoi(match[2])
		for f, ms := range w.mids {
			if f != match[1] && !strings.HasSuffix(match[1], "/"+f) && !strings.HasSuffix(f, "/"+match[1]) {
				continue
			}
			found := false
			for _, sp := range w.spans[f] {
				if sp.from <= line && line <= sp.to {
					blame(sp.m)
					found = true
				}
			}
			if !found {
				for _, m := range ms {
					blame(m)
				}
			}
		}
	}
	return bad
}

// all returns every woven mutant.
func (w *weaving) all() []*mutant {
	var ms []*mutant
	for m := range w.ids {
		ms = append(ms, m)
	}
	return ms
}
