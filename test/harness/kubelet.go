package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// KubeletDo sends method to url on a kubelet's server through client
// (which holds the TLS and credentials the server wants) and returns the
// body of a 200; any other status is an error naming it, with the body.
// The e2e suite and the node lane both read kubelet this way.
func KubeletDo(client *http.Client, method, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("%s %s: %s: %s", method, req.URL.RequestURI(), resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}
