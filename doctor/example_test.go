package doctor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/sqlite"
)

// Check on racefree's default SQLite (WAL, synchronous NORMAL) finds one
// thing to know and nothing to fix.
func ExampleCheck() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "doctor-example-")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	rep, err := doctor.Check(ctx, db, doctor.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range rep.Findings {
		fmt.Println(f.Severity, f.Code)
	}
	fmt.Println("failed:", rep.Failed())
	// Output:
	// info sqlite-wal-normal
	// failed: false
}
