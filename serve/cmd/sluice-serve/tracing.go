package main

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// openTracing returns a tracer provider that batches spans to the OTLP/gRPC
// collector at endpoint ("http://host:port" in plain text, "https://…"
// over TLS), sampling ratio of the requests that come without a sampled
// parent (a request Envoy traces is traced as Envoy decided). Its
// Shutdown sends the spans not yet sent and stops it.
func openTracing(endpoint string, ratio float64) (*sdktrace.TracerProvider, error) {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return nil, fmt.Errorf("-otlp-endpoint %q: %w", endpoint, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("-otlp-endpoint %q: want http://host:port (plain text) or https://host:port (TLS)", endpoint)
	case u.Port() == "" || u.Hostname() == "":
		return nil, fmt.Errorf("-otlp-endpoint %q: want a host and a port, such as http://127.0.0.1:4317", endpoint)
	case ratio < 0 || ratio > 1:
		return nil, fmt.Errorf("-trace-ratio %v: want 0 to 1", ratio)
	}
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("-otlp-endpoint %q: %w", endpoint, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "sluice-serve")}
	if host, err := os.Hostname(); err == nil {
		attrs = append(attrs, attribute.String("host.name", host))
	}
	res := resource.NewSchemaless(attrs...)
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(res),
	), nil
}
