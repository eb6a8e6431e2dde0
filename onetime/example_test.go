package onetime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/sqlite"
)

func Example() {
	dir, _ := os.MkdirTemp("", "racefree-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	tokens, err := onetime.New(db, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	code, err := tokens.Issue(ctx, db, "password-reset", "user-42", 15*time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		r, err := tokens.Consume(ctx, db, "password-reset", code.Token)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(r.Outcome, r.Subject)
	}
	// Output:
	// consumed user-42
	// already_used user-42
}

func ExampleStore_Rotate() {
	dir, _ := os.MkdirTemp("", "racefree-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	// A grace window lets a client whose reply was lost retry; its secret
	// must be the same on every instance.
	tokens, err := onetime.New(db, &onetime.Options{Grace: 30 * time.Second, Secret: []byte("a secret of at least 32 bytes....")})
	if err != nil {
		fmt.Println(err)
		return
	}
	first, _ := tokens.IssueRefresh(ctx, db, "user-42", 30*24*time.Hour)
	rotated, _ := tokens.Rotate(ctx, db, first.Token)
	retried, _ := tokens.Rotate(ctx, db, first.Token) // the reply was lost
	fmt.Println(rotated.Outcome, retried.Outcome, retried.Next.Token == rotated.Next.Token)

	next, _ := tokens.Rotate(ctx, db, rotated.Next.Token)
	stolen, _ := tokens.Rotate(ctx, db, first.Token) // a retired token, presented again
	refused, _ := tokens.Rotate(ctx, db, next.Next.Token)
	fmt.Println(next.Outcome, stolen.Outcome, refused.Outcome)
	// Output:
	// rotated replayed true
	// rotated reused revoked
}
