// kubectl-decode reads manifest files the way `kubectl apply -f FILE` does
// and prints what kubectl would send: each object as one line of JSON, in
// order, then, if reading failed, one line {"error": "..."}.
//
// It uses the cli-runtime resource builder exactly as kubectl apply
// configures it (Unstructured, ContinueOnError, FilenameParam, Flatten), in
// local mode: local mode needs no RESTMapper or server (mapper.infoForData
// and infoForObject skip the REST mapping when the builder is local), and
// nothing else of the builder's chain asks a server for files.
//
//	kubectl-decode FILE...       one report per file, each ended by a line "--"
//	kubectl-decode -stream EXT   a long-lived oracle for the fuzzer: reads
//	                             inputs as a 4-byte big-endian length and the
//	                             bytes, writes each to a file named input.EXT
//	                             (so `apply -f` sees a real file), and answers
//	                             with a 4-byte length and a JSON report
//	                             {"objects":[...],"error":"..."}
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/cli-runtime/pkg/resource"
)

// report is what kubectl makes of one file.
type report struct {
	Objects []json.RawMessage `json:"objects"`
	Error   *string           `json:"error,omitempty"`
}

// decode reads one file as `kubectl apply -f file` does.
func decode(path string) report {
	rep := report{Objects: []json.RawMessage{}}
	result := resource.NewLocalBuilder().
		Unstructured().
		ContinueOnError().
		FilenameParam(false, &resource.FilenameOptions{Filenames: []string{path}}).
		Flatten().
		Do()
	err := result.Visit(func(info *resource.Info, err error) error {
		if err != nil {
			return err
		}
		// What kubectl sends: the object encoded as JSON by apimachinery.
		raw, err := json.Marshal(info.Object)
		if err != nil {
			return err
		}
		rep.Objects = append(rep.Objects, raw)
		return nil
	})
	if err != nil {
		msg := err.Error()
		rep.Error = &msg
	}
	return rep
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-stream" {
		if err := stream(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "kubectl-decode:", err)
			os.Exit(1)
		}
		return
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for _, path := range os.Args[1:] {
		rep := decode(path)
		for _, obj := range rep.Objects {
			fmt.Fprintf(out, "%s\n", obj)
		}
		if rep.Error != nil {
			line, _ := json.Marshal(map[string]string{"error": *rep.Error})
			fmt.Fprintf(out, "%s\n", line)
		}
		fmt.Fprintln(out, "--")
	}
}

func stream(ext string) error {
	dir, err := os.MkdirTemp("", "kubectl-decode-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "input."+ext)
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	var size [4]byte
	for {
		if _, err := io.ReadFull(in, size[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		input := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(in, input); err != nil {
			return err
		}
		if err := os.WriteFile(path, input, 0o600); err != nil {
			return err
		}
		answer, err := json.Marshal(decode(path))
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint32(size[:], uint32(len(answer)))
		out.Write(size[:])
		out.Write(answer)
		if err := out.Flush(); err != nil {
			return err
		}
	}
}
