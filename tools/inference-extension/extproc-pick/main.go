// Command extproc-pick asks an endpoint picker which model server should serve each request, the
// way a gateway does: through Envoy's external-processing gRPC API (envoy.service.ext_proc.v3).
//
// Each line of standard input is one request, a JSON object {"path": "/v1/chat/completions",
// "body": {...}} (path defaults to /v1/chat/completions). For each, one ext_proc stream is opened;
// the request headers (end of stream false) and then the whole body (end of stream true) are sent,
// as Envoy does in buffered mode, and the picker's answer to the headers is read. One JSON line per
// request is printed: {"endpoint": "<ip:port>"} from the x-gateway-destination-endpoint header
// mutation (also checked against the envoy.lb dynamic metadata), or {"status": <code>, "body": "..."}
// when the picker answered immediately (no pod, overload).
//
// The picker is dialled without TLS (--secure-serving=false) or with TLS and no verification
// (-tls: the picker's self-signed certificate), on the address given with -addr. Only loopback
// addresses are accepted: nothing here may reach beyond the machine.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

const endpointHeader = "x-gateway-destination-endpoint"

type request struct {
	Path string          `json:"path"`
	Body json.RawMessage `json:"body"`
}

type answer struct {
	Endpoint string `json:"endpoint,omitempty"`
	Metadata string `json:"metadata,omitempty"`
	Status   int    `json:"status,omitempty"`
	Body     string `json:"body,omitempty"`
	Error    string `json:"error,omitempty"`
}

func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address", addr)
	}
	return nil
}

func pick(ctx context.Context, client extprocv3.ExternalProcessorClient, id int, req request) answer {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := client.Process(ctx)
	if err != nil {
		return answer{Error: err.Error()}
	}
	path := req.Path
	if path == "" {
		path = "/v1/chat/completions"
	}
	headers := []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")},
		{Key: ":path", RawValue: []byte(path)},
		{Key: ":authority", RawValue: []byte("gateway")},
		{Key: "content-type", RawValue: []byte("application/json")},
		{Key: "content-length", RawValue: []byte(fmt.Sprint(len(req.Body)))},
		{Key: "x-request-id", RawValue: []byte(fmt.Sprintf("extproc-pick-%d-%d", os.Getpid(), id))},
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: headers}},
	}}); err != nil {
		return answer{Error: err.Error()}
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: req.Body, EndOfStream: true},
	}}); err != nil {
		return answer{Error: err.Error()}
	}
	resp, err := stream.Recv()
	if err != nil {
		return answer{Error: err.Error()}
	}
	var out answer
	if immediate := resp.GetImmediateResponse(); immediate != nil {
		out = answer{Status: int(immediate.GetStatus().GetCode()), Body: string(immediate.GetBody())}
	} else {
		for _, h := range resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
			if h.GetHeader().GetKey() == endpointHeader {
				out.Endpoint = string(h.GetHeader().GetRawValue())
			}
		}
		if lb := resp.GetDynamicMetadata().GetFields()["envoy.lb"]; lb != nil {
			out.Metadata = lb.GetStructValue().GetFields()[endpointHeader].GetStringValue()
		}
		if out.Endpoint == "" {
			out.Error = "no " + endpointHeader + " in the picker's answer"
		}
	}
	// End the exchange as a gateway whose client went away would: the picker runs its completion
	// hooks when the stream ends.
	_ = stream.CloseSend()
	for {
		if _, err := stream.Recv(); err != nil {
			if err != io.EOF && out.Error == "" && out.Endpoint == "" && out.Status == 0 {
				out.Error = err.Error()
			}
			break
		}
	}
	return out
}

func main() {
	addr := flag.String("addr", "", "the picker's ext_proc address, host:port on loopback")
	useTLS := flag.Bool("tls", false, "TLS without verification (the picker's self-signed certificate)")
	flag.Parse()
	if err := loopback(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "extproc-pick:", err)
		os.Exit(2)
	}
	creds := insecure.NewCredentials()
	if *useTLS {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) // #nosec G402: loopback, self-signed
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintln(os.Stderr, "extproc-pick:", err)
		os.Exit(1)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for id := 0; in.Scan(); id++ {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = out.Encode(answer{Error: "bad input line: " + err.Error()})
			continue
		}
		_ = out.Encode(pick(context.Background(), client, id, req))
	}
}
