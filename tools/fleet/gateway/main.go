// Command gateway is the real-fleet tests' stand-in for Envoy in front of an endpoint picker (EPP).
//
// Envoy has no package this project can install, and the EPP is an Envoy ext_proc server, so the tests need a front
// that speaks ext_proc as Envoy does in the inference-gateway charts: every client request is one
// envoy.service.ext_proc.v3.ExternalProcessor/Process stream with request and response bodies FULL_DUPLEX_STREAMED
// (gateway-api-inference-extension v1.5.0 config/charts/standalone/values.yaml:130-136, test/testdata/envoy.yaml).
// The front relays the EPP's header and body mutations and immediate responses, and forwards the request to the
// endpoint the EPP picked in x-gateway-destination-endpoint, as Envoy's ORIGINAL_DST cluster with use_http_header
// does. With -otlp it also traces as Envoy's OpenTelemetry tracer does: one SERVER span "ingress" a request, the
// custom_tags of docs/sending-traces.md as http.request.header.* attributes, and its context injected as the
// upstream request's traceparent by the router, after the EPP's mutations.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	destinationHeader = "x-gateway-destination-endpoint"
	requestIDHeader   = "x-request-id"
	// upstreamHostHeader tells the client which endpoint served its request (Envoy's %UPSTREAM_HOST%), so a test
	// knows the truth of routing without asking sloscope.
	upstreamHostHeader = "x-fleet-upstream-host"
	bodyChunk          = 64 << 10
	maxRequestBody     = 16 << 20
)

// The request headers the front captures on its span, as the custom_tags of docs/sending-traces.md.
var capturedHeaders = []string{
	"x-llm-d-slo-ttft-ms", "x-llm-d-slo-tpot-ms", "x-slo-ttft-ms", "x-slo-tpot-ms", requestIDHeader,
	"x-prediction-based-scheduling", "x-prediction-based-scheduling-off",
}

// Hop-by-hop headers, never forwarded (RFC 9110 section 7.6.1), and the pseudo-headers of the ext_proc header map.
func forwardable(key string) bool {
	switch key {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host",
		"content-length":
		return false
	}
	return !strings.HasPrefix(key, ":")
}

type front struct {
	epp      extproc.ExternalProcessorClient
	tracer   trace.Tracer
	client   *http.Client
	timeout  time.Duration
	messages time.Duration
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address the front serves HTTP/1.1 on")
	eppAddr := flag.String("epp", "127.0.0.1:9002", "the EPP's ext_proc gRPC address")
	eppTLS := flag.Bool("epp-tls", true, "TLS to the EPP without verifying its certificate, as the charts' Envoy (the EPP's --secure-serving default)")
	otlp := flag.String("otlp", "", "OTLP/gRPC host:port the front's spans go to; empty: no tracing")
	service := flag.String("service-name", "inference-gateway", "service.name of the front's spans")
	timeout := flag.Duration("request-timeout", 120*time.Second, "total deadline of one request")
	messages := flag.Duration("message-timeout", 30*time.Second, "deadline of each ext_proc answer (Envoy's message_timeout)")
	flag.Parse()

	creds := insecure.NewCredentials()
	if *eppTLS {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the EPP's self-signed certificate, as Envoy's empty validation_context
	}
	conn, err := grpc.NewClient(*eppAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		log.Fatalf("ext_proc client: %v", err)
	}
	defer conn.Close()

	tracer, shutdown := newTracer(*otlp, *service)
	defer shutdown()

	f := &front{
		epp:      extproc.NewExternalProcessorClient(conn),
		tracer:   tracer,
		timeout:  *timeout,
		messages: *messages,
		client: &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			DisableCompression:  true,
		}},
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	server := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	fmt.Fprintf(os.Stderr, "gateway: serving on %s, ext_proc %s\n", listener.Addr(), *eppAddr)
	if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("serve: %v", err)
	}
}

func newTracer(endpoint, service string) (trace.Tracer, func()) {
	if endpoint == "" {
		return noop.NewTracerProvider().Tracer("gateway"), func() {}
	}
	exporter, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		log.Fatalf("otlp exporter: %v", err)
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(200*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	return provider.Tracer("envoy"), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = provider.Shutdown(ctx)
	}
}

// exchange is one request's ext_proc stream: what the front sends, and the EPP's answers in order, the stream's end
// last (one channel, so an answer sent just before the EPP closed the stream is never overtaken by the close).
type exchange struct {
	stream  extproc.ExternalProcessor_ProcessClient
	answers chan received
	timeout time.Duration
}

type received struct {
	answer *extproc.ProcessingResponse
	err    error
}

func (f *front) open(ctx context.Context) (*exchange, error) {
	stream, err := f.epp.Process(ctx)
	if err != nil {
		return nil, err
	}
	x := &exchange{stream: stream, answers: make(chan received, 64), timeout: f.messages}
	go func() {
		for {
			answer, err := stream.Recv()
			select {
			case x.answers <- received{answer, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return x, nil
}

var errClosed = errors.New("ext_proc stream closed before its answer")

func (x *exchange) next() (*extproc.ProcessingResponse, error) {
	timer := time.NewTimer(x.timeout)
	defer timer.Stop()
	select {
	case got := <-x.answers:
		if got.err == io.EOF {
			return nil, errClosed
		}
		return got.answer, got.err
	case <-timer.C:
		return nil, fmt.Errorf("no ext_proc answer within %s", x.timeout)
	}
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	started := time.Now()
	if r.Header.Get(requestIDHeader) == "" { // Envoy's generate_request_id
		r.Header.Set(requestIDHeader, uuid4())
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.timeout)
	defer cancel()
	ctx, span := f.tracer.Start(ctx, "ingress", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(started))
	rec := &recorder{ResponseWriter: w}
	defer func() { finishSpan(span, r, rec) }()

	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody))
	if err != nil {
		return // the client went away
	}
	x, err := f.open(ctx)
	if err != nil {
		rec.fail(http.StatusInternalServerError, "ext_proc: "+err.Error())
		return
	}
	defer func() { _ = x.stream.CloseSend() }()

	headers, body, immediate, err := f.requestPhase(x, r, body)
	if err != nil {
		rec.fail(http.StatusInternalServerError, "ext_proc: "+err.Error())
		return
	}
	if immediate != nil {
		rec.immediate(immediate)
		return
	}
	destination := strings.TrimSpace(strings.Split(headers.Get(destinationHeader), ",")[0])
	if destination == "" {
		rec.fail(http.StatusServiceUnavailable, "no healthy upstream")
		return
	}
	span.SetAttributes(attribute.String("upstream_address", destination))
	upstream, err := f.forward(ctx, r, destination, headers, body)
	if err != nil {
		if ctx.Err() == nil {
			rec.fail(http.StatusServiceUnavailable, "upstream connect error or disconnect/reset before headers. reset reason: "+err.Error())
		}
		return
	}
	defer upstream.Body.Close()
	f.responsePhase(ctx, x, upstream, rec)
}

// requestPhase sends the request's headers and body and applies the EPP's answers: the headers and body to forward,
// or the immediate response the EPP gave instead.
func (f *front) requestPhase(x *exchange, r *http.Request, body []byte) (http.Header, []byte, *extproc.ImmediateResponse, error) {
	pairs := []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte(r.Method)},
		{Key: ":path", RawValue: []byte(r.URL.RequestURI())},
		{Key: ":authority", RawValue: []byte(r.Host)},
		{Key: ":scheme", RawValue: []byte("http")},
	}
	for key, values := range r.Header {
		for _, value := range values {
			pairs = append(pairs, &corev3.HeaderValue{Key: strings.ToLower(key), RawValue: []byte(value)})
		}
	}
	first := &extproc.ProcessingRequest{
		Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: pairs}, EndOfStream: len(body) == 0,
		}},
		ProtocolConfig: &extproc.ProtocolConfiguration{
			RequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}
	if err := x.stream.Send(first); err != nil {
		return nil, nil, nil, err
	}
	for start := 0; start < len(body); start += bodyChunk {
		end := min(start+bodyChunk, len(body))
		chunk := &extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{
			RequestBody: &extproc.HttpBody{Body: body[start:end], EndOfStream: end == len(body)},
		}}
		if err := x.stream.Send(chunk); err != nil {
			return nil, nil, nil, err
		}
	}

	headers := r.Header.Clone()
	answer, err := x.next()
	if err != nil {
		return nil, nil, nil, err
	}
	if immediate := answer.GetImmediateResponse(); immediate != nil {
		return nil, nil, immediate, nil
	}
	headersAnswer := answer.GetRequestHeaders()
	if headersAnswer == nil {
		return nil, nil, nil, fmt.Errorf("expected the request headers' answer, got %T", answer.Response)
	}
	mutate(headers, headersAnswer.GetResponse().GetHeaderMutation())
	if len(body) == 0 {
		return headers, body, nil, nil
	}
	var forwarded []byte
	for {
		answer, err := x.next()
		if err != nil {
			return nil, nil, nil, err
		}
		if immediate := answer.GetImmediateResponse(); immediate != nil {
			return nil, nil, immediate, nil
		}
		common := answer.GetRequestBody().GetResponse()
		if common == nil {
			return nil, nil, nil, fmt.Errorf("expected a request body answer, got %T", answer.Response)
		}
		mutate(headers, common.GetHeaderMutation())
		switch m := common.GetBodyMutation().GetMutation().(type) {
		case *extproc.BodyMutation_StreamedResponse:
			forwarded = append(forwarded, m.StreamedResponse.GetBody()...)
			if m.StreamedResponse.GetEndOfStream() {
				return headers, forwarded, nil, nil
			}
		case *extproc.BodyMutation_Body:
			return headers, m.Body, nil, nil
		case *extproc.BodyMutation_ClearBody:
			return headers, nil, nil, nil
		default:
			return headers, body, nil, nil // CONTINUE without a mutation: the body as it was
		}
	}
}

func mutate(headers http.Header, mutation *extproc.HeaderMutation) {
	for _, option := range mutation.GetSetHeaders() {
		value := string(option.GetHeader().GetRawValue())
		if value == "" {
			value = option.GetHeader().GetValue()
		}
		headers.Set(option.GetHeader().GetKey(), value)
	}
	for _, key := range mutation.GetRemoveHeaders() {
		headers.Del(key)
	}
}

// forward sends the request to the picked endpoint; with tracing, the front's context replaces any traceparent,
// as Envoy's router injects the active span's context into the upstream request.
func (f *front) forward(ctx context.Context, r *http.Request, destination string, headers http.Header, body []byte) (*http.Response, error) {
	upstream, err := http.NewRequestWithContext(ctx, r.Method, "http://"+destination+r.URL.RequestURI(), strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	for key, values := range headers {
		if forwardable(strings.ToLower(key)) {
			upstream.Header[key] = values
		}
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(upstream.Header))
	}
	return f.client.Do(upstream)
}

// responsePhase relays the model server's response through the EPP: headers first, then every body chunk as it
// arrives, each written to the client as soon as the EPP hands it back.
func (f *front) responsePhase(ctx context.Context, x *exchange, upstream *http.Response, rec *recorder) {
	pairs := []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(strconv.Itoa(upstream.StatusCode))}}
	for key, values := range upstream.Header {
		for _, value := range values {
			pairs = append(pairs, &corev3.HeaderValue{Key: strings.ToLower(key), RawValue: []byte(value)})
		}
	}
	if err := x.stream.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extproc.HttpHeaders{Headers: &corev3.HeaderMap{Headers: pairs}},
	}}); err != nil {
		rec.fail(http.StatusInternalServerError, "ext_proc: "+err.Error())
		return
	}
	answer, err := x.next()
	if err != nil {
		rec.fail(http.StatusInternalServerError, "ext_proc: "+err.Error())
		return
	}
	if immediate := answer.GetImmediateResponse(); immediate != nil {
		rec.immediate(immediate)
		return
	}
	headers := upstream.Header.Clone()
	mutate(headers, answer.GetResponseHeaders().GetResponse().GetHeaderMutation())
	for key, values := range headers {
		if forwardable(strings.ToLower(key)) {
			rec.Header()[key] = values
		}
	}
	rec.Header().Set(upstreamHostHeader, upstream.Request.URL.Host) // the tests' truth of which pod served
	rec.WriteHeader(upstream.StatusCode)
	rec.flush()

	sendErr := make(chan error, 1)
	go func() { sendErr <- relayBody(x, upstream.Body) }()
	for {
		answer, err := x.next()
		if err != nil {
			if ctx.Err() == nil {
				log.Printf("gateway: response body: %v", err)
			}
			return
		}
		streamed := answer.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if streamed == nil {
			continue
		}
		if len(streamed.GetBody()) > 0 {
			if _, err := rec.Write(streamed.GetBody()); err != nil {
				return // the client went away: the deferred cancel resets the upstream and the stream
			}
			rec.flush()
		}
		if streamed.GetEndOfStream() {
			<-sendErr
			return
		}
	}
}

func relayBody(x *exchange, body io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			if sendErr := x.stream.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseBody{
				ResponseBody: &extproc.HttpBody{Body: chunk},
			}}); sendErr != nil {
				return sendErr
			}
		}
		if err == io.EOF {
			return x.stream.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseBody{
				ResponseBody: &extproc.HttpBody{EndOfStream: true},
			}})
		}
		if err != nil {
			return err
		}
	}
}

// recorder remembers the status and bytes written, for the span.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
		r.ResponseWriter.WriteHeader(status)
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

func (r *recorder) flush() {
	if flusher, ok := r.ResponseWriter.(http.Flusher); ok {
		flusher.Flush()
	}
}

func (r *recorder) fail(status int, message string) {
	if r.status != 0 {
		return
	}
	r.Header().Set("content-type", "text/plain")
	r.WriteHeader(status)
	_, _ = r.Write([]byte(message))
}

func (r *recorder) immediate(answer *extproc.ImmediateResponse) {
	status := int(answer.GetStatus().GetCode())
	if status == 0 {
		status = http.StatusOK
	}
	headers := http.Header{}
	mutate(headers, answer.GetHeaders())
	for key, values := range headers {
		r.Header()[key] = values
	}
	r.WriteHeader(status)
	_, _ = r.Write(answer.GetBody())
}

// finishSpan sets what Envoy's HttpTracerUtility::finalizeDownstreamSpan tags, with the captured headers.
func finishSpan(span trace.Span, r *http.Request, rec *recorder) {
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("component", "proxy"),
		attribute.String("guid:x-request-id", r.Header.Get(requestIDHeader)),
		attribute.String("http.method", r.Method),
		attribute.String("http.url", "http://"+r.Host+r.URL.RequestURI()),
		attribute.String("http.protocol", r.Proto),
		attribute.String("http.status_code", strconv.Itoa(rec.status)),
		attribute.String("response_size", strconv.Itoa(rec.bytes)),
		attribute.String("user_agent", r.UserAgent()),
	}
	for _, name := range capturedHeaders {
		if value := r.Header.Get(name); value != "" {
			attrs = append(attrs, attribute.String("http.request.header."+name, value))
		}
	}
	span.SetAttributes(attrs...)
	if rec.status >= 500 || rec.status == 0 {
		span.SetAttributes(attribute.String("error", "true"))
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
