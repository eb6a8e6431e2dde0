package main

import (
	"github.com/racefree/racefree/server"
	"github.com/spf13/cobra"
)

// openapiCmd prints the OpenAPI document serve answers at GET
// /openapi.json, without a database: clients/typescript generates its
// types from it (npm run generate).
func openapiCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "openapi",
		Short: "Print the OpenAPI 3.1 document of the HTTP API (as GET /openapi.json serves it); connects to nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := server.OpenAPIJSON()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
}
