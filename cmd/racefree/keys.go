package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/schema"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

// keysCmd manages the API keys of the HTTP server. It runs as the owner
// of racefree's tables (the role that runs migrate up): the application
// role that serve logs in as may only read keys.
func keysCmd() *cobra.Command {
	var dbFlag string
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke the API keys of the HTTP server (one tenant each)",
	}
	cmd.PersistentFlags().StringVar(&dbFlag, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")

	var createTenant, scopes, name, createFormat string
	create := &cobra.Command{
		Use:   "create --tenant T [--scope read,write] [--name N] [--format json]",
		Short: "Create a key of tenant T: prints the key once on stdout, its id on stderr (--format json: one object with both)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := jsonOutput(createFormat)
			if err != nil {
				return err
			}
			sc, err := apikey.ParseScopes(scopes)
			if err != nil {
				return err
			}
			if err := checkKeyArgs(createTenant, name); err != nil {
				return err
			}
			return withKeys(cmd.Context(), dbFlag, func(ctx context.Context, db *racefree.DB, s *apikey.Store) error {
				c, err := s.Create(ctx, createTenant, sc, name)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
						keyJSON
						Token string `json:"token"`
					}{toKeyJSON(c.Key), c.Token})
				}
				fmt.Fprintln(cmd.OutOrStdout(), c.Token)
				fmt.Fprintf(cmd.ErrOrStderr(), "created key %s of tenant %s with scopes %s; it is shown once: store it now\n", c.ID, c.Tenant, c.Scopes)
				return nil
			})
		},
	}
	create.Flags().StringVar(&createTenant, "tenant", "", "the key's tenant (required)")
	create.Flags().StringVar(&scopes, "scope", "read,write", "comma-separated scopes: read (GET routes), write (state-changing routes), admin (operator routes)")
	create.Flags().StringVar(&name, "name", "", "a name for the key, shown by keys list")
	formatFlag(create, &createFormat, "output: text (the key on stdout, its id on stderr) or json (one object: the fields of keys list and the token)")

	var listTenant, format string
	list := &cobra.Command{
		Use:   "list [--tenant T] [--format json]",
		Short: "List the keys of tenant T, or of every tenant (never a secret or a hash)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return racefree.Invalid("format", "must be text or json")
			}
			if listTenant != "" {
				if err := tenant.Check(listTenant); err != nil {
					return err
				}
			}
			return withKeys(cmd.Context(), dbFlag, func(ctx context.Context, db *racefree.DB, s *apikey.Store) error {
				var keys []apikey.Key
				collect := func(ctx context.Context) error {
					ks, err := s.List(ctx, tenant.From(ctx))
					keys = append(keys, ks...)
					return err
				}
				var err error
				if listTenant != "" {
					var tctx context.Context
					if tctx, err = tenant.With(ctx, listTenant); err == nil {
						err = collect(tctx)
					}
				} else {
					err = tenant.Each(ctx, db, collect)
				}
				if err != nil {
					return err
				}
				return printKeys(cmd.OutOrStdout(), keys, format)
			})
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "list this tenant's keys only (default: every tenant's)")
	list.Flags().StringVar(&format, "format", "text", "output: text (a table) or json (one JSON object per key and line)")

	var revokeTenant, revokeFormat string
	revoke := &cobra.Command{
		Use:   "revoke --tenant T ID",
		Short: "Revoke key ID of tenant T: every server refuses it within a second (revoking twice is harmless)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := jsonOutput(revokeFormat)
			if err != nil {
				return err
			}
			if err := checkKeyArgs(revokeTenant, ""); err != nil {
				return err
			}
			if err := apikey.CheckID(args[0]); err != nil {
				return err
			}
			return withKeys(cmd.Context(), dbFlag, func(ctx context.Context, db *racefree.DB, s *apikey.Store) error {
				k, err := s.Revoke(ctx, revokeTenant, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(toKeyJSON(k))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "key %s of tenant %s revoked at %s\n", k.ID, k.Tenant, k.RevokedAt.Format(time.RFC3339))
				return nil
			})
		},
	}
	revoke.Flags().StringVar(&revokeTenant, "tenant", "", "the key's tenant (required)")
	formatFlag(revoke, &revokeFormat, "output: text (one line) or json (one object: the fields of keys list)")

	cmd.AddCommand(create, list, revoke)
	return cmd
}

// checkKeyArgs refuses a missing or invalid tenant, and a bad name, before
// anything is opened.
func checkKeyArgs(tenantID, name string) error {
	if tenantID == "" {
		return racefree.Invalid("tenant", "is required (--tenant)")
	}
	if err := tenant.Check(tenantID); err != nil {
		return err
	}
	if name != "" {
		return racefree.CheckText("name", name, apikey.MaxNameBytes)
	}
	return nil
}

// withKeys opens db, which must exist and be migrated to tenants (a
// tenant other than the default needs migration 012), and runs fn with
// its key store.
func withKeys(ctx context.Context, db string, fn func(ctx context.Context, db *racefree.DB, s *apikey.Store) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h, err := openExisting(ctx, db, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	if err != nil {
		return err
	}
	defer h.Close()
	if err := schema.Need(ctx, h, h, tenant.TenantsVersion); err != nil {
		return err
	}
	s, err := apikey.New(h, nil)
	if err != nil {
		return err
	}
	return fn(ctx, h, s)
}

type keyJSON struct {
	Tenant    string `json:"tenant"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	Scopes    string `json:"scopes"`
	CreatedAt string `json:"created_at"`
	RevokedAt string `json:"revoked_at,omitempty"`
}

// toKeyJSON returns k as keys list --format json prints it.
func toKeyJSON(k apikey.Key) keyJSON {
	j := keyJSON{Tenant: k.Tenant, ID: k.ID, Name: k.Name, Scopes: k.Scopes.String(), CreatedAt: k.CreatedAt.Format(time.RFC3339)}
	if k.Revoked() {
		j.RevokedAt = k.RevokedAt.Format(time.RFC3339)
	}
	return j
}

func printKeys(w io.Writer, keys []apikey.Key, format string) error {
	rows := make([]keyJSON, len(keys))
	for i, k := range keys {
		rows[i] = toKeyJSON(k)
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tID\tNAME\tSCOPES\tCREATED\tREVOKED")
	for _, r := range rows {
		revoked := r.RevokedAt
		if revoked == "" {
			revoked = "-"
		}
		name := r.Name
		if strings.ContainsFunc(name, unicode.IsControl) {
			name = strconv.Quote(name) // one key, one line
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Tenant, r.ID, name, r.Scopes, r.CreatedAt, revoked)
	}
	return tw.Flush()
}
