// Command ascend-pd-crd-server: k8s.io/apiextensions-apiserver on its own, as a CRD checker.
//
// It is the library's standalone server with two differences, both so that kubectl works
// against it without the rest of a control plane (which normally provides them):
//   - the OpenAPI v2 document is configured (kubectl explain reads the CRD schema from it);
//   - the /apis discovery document is served (upstream turns it off because the aggregator of
//     a full control plane serves it; without it every kubectl command fails on discovery).
//
// Built by ascend_pd_dev.controlplane.crd_build in GOPATH mode against Debian's Go sources.
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/component-base/cli"
)

func run(ctx context.Context, o *options.CustomResourceDefinitionsServerOptions) error {
	config, err := o.Config()
	if err != nil {
		return err
	}
	definitions := openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(generatedopenapi.GetOpenAPIDefinitions)
	config.GenericConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(
		definitions, openapinamer.NewDefinitionNamer(apiserver.Scheme))

	completed := config.Complete()
	// Complete() switches discovery off; we are the only server, so switch it back on.
	completed.GenericConfig.EnableDiscovery = true
	server, err := completed.New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		return err
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

func command(ctx context.Context) *cobra.Command {
	o := options.NewCustomResourceDefinitionsServerOptions(os.Stdout, os.Stderr)
	cmd := &cobra.Command{
		Use:   "ascend-pd-crd-server",
		Short: "A standalone CustomResourceDefinition API server (no core API) for checking CRDs",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return o.ServerRunOptions.ComponentGlobalsRegistry.Set()
		},
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return run(c.Context(), o)
		},
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	return cmd
}

func main() {
	os.Exit(cli.Run(command(genericapiserver.SetupSignalContext())))
}
