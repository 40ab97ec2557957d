package api_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the golden NDJSON streams")

// volatile matches the values that differ per run: ids the runner or the
// fake agent mint.
var volatile = []*regexp.Regexp{
	regexp.MustCompile(`"turnId":"[^"]*"`),
	regexp.MustCompile(`"agentSessionId":"[^"]*"`),
	regexp.MustCompile(`"sandbox":"local-[0-9a-f]*"`),
	regexp.MustCompile(`"id":"int_[0-9a-f]*"`),
	regexp.MustCompile(`"at":"[^"]*"`),
	regexp.MustCompile(`"sessionId":"s[0-9]+"`),
	regexp.MustCompile(`"sessionId":"fake-[0-9a-f]+"`), // the harness's, on a turn sent without one
}

func normalize(line string) string {
	for _, re := range volatile {
		line = re.ReplaceAllStringFunc(line, func(m string) string {
			k, _, _ := strings.Cut(m, ":")
			return k + `:"<volatile>"`
		})
	}
	return line
}

// TestGoldenStreams runs each testdata/turns/*.txtar: its request.json
// (the prompt is the fake agent's script) through POST /stream, and
// compares the normalised NDJSON with its events.ndjson. Run with
// -update to rewrite them, then review the diff.
func TestGoldenStreams(t *testing.T) {
	files, _ := filepath.Glob("testdata/turns/*.txtar")
	if len(files) == 0 {
		t.Fatal("no golden streams")
	}
	e := newEnv(t)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var reqBody []byte
			var want string
			for _, f := range ar.Files {
				switch f.Name {
				case "request.json":
					reqBody = f.Data
				case "events.ndjson":
					want = string(f.Data)
				}
			}
			// Each golden turn gets a session of its own.
			var body map[string]any
			if err := json.Unmarshal(reqBody, &body); err != nil {
				t.Fatal(err)
			}
			if _, ok := body["sessionId"]; ok {
				body["sessionId"] = "s" + strconv.FormatInt(sessionSeq.Add(1), 10)
			}
			b, _ := json.Marshal(body)
			resp, sc := stream(t, e, t.Context(), string(b))
			defer resp.Body.Close()
			var got strings.Builder
			for sc.Scan() {
				if bytes.Contains(sc.Bytes(), []byte(`"kind":"ping"`)) {
					continue
				}
				got.WriteString(normalize(sc.Text()) + "\n")
			}
			if *update {
				for i := range ar.Files {
					if ar.Files[i].Name == "events.ndjson" {
						ar.Files[i].Data = []byte(got.String())
					}
				}
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if diff := cmp.Diff(strings.Split(want, "\n"), strings.Split(got.String(), "\n")); diff != "" {
				t.Errorf("stream differs from %s (-want +got):\n%s", file, diff)
			}
		})
	}
}
