package tenant_test

import (
	"context"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
)

func racefreeOpen(ctx context.Context, u string) (*racefree.DB, error) {
	return dsn.Open(ctx, u, &racefree.Config{MaxOpenConns: 1})
}
