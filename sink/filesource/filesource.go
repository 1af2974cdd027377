// Package filesource is a sink.Source over files of newline-delimited
// JSON (or any lines): one partition per file, named by its path as
// given; a record per non-empty line, its value the line without the line
// break; the position after a record is the byte offset just past its
// line, in decimal. Files are read to their end: the source is bounded.
//
// A line is a record only once its line break is there: a file may be
// being appended to, and a last line without its break may be half of
// one. It is not read, and no position goes past it, until the break is
// written (the next run reads it whole). End every file with a line break.
package filesource

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"

	"github.com/xadb/xa/sink"
)

// Config lists the files.
type Config struct {
	// Files are the paths, one partition each.
	Files []string
	// Batch bounds the records of one Poll (default 500).
	Batch int
	// MaxLine bounds a line (default 1 MiB); a longer one is an error.
	MaxLine int
}

// Source reads the files of a Config. It implements sink.Source.
type Source struct {
	cfg       Config
	h         sink.Handler
	assigned  bool
	parts     []*part
	rr        int
	committed map[string]string
	limit     int // LimitPoll's; 0: none
}

type part struct {
	name string
	f    *os.File
	r    *bufio.Reader
	off  int64 // offset of the next byte r returns
	eof  bool
	// partial is the length of an unterminated last line seen at the
	// end of the file (not read: see the package comment).
	partial int64
}

var _ sink.Source = (*Source)(nil)

// Limitable returns the source as a sink.PollLimiter: the sink then
// bounds each Poll, below Batch, by the room left in its open checkpoint,
// so that no checkpoint holds more than its CheckpointRecords (xactl
// builds its sources so). The Source itself is not one: its Polls return
// Batch records whatever the checkpoint holds.
func (s *Source) Limitable() sink.Source { return limitable{s} }

// limitable is a Source that is a sink.PollLimiter.
type limitable struct{ *Source }

var _ sink.PollLimiter = limitable{}

// LimitPoll bounds the records of the following Polls to n, below Batch
// (n <= 0: Batch alone); see sink.PollLimiter.
func (l limitable) LimitPoll(n int) { l.limit = max(n, 0) }

// New returns a Source of cfg.
func New(cfg Config) (*Source, error) {
	if len(cfg.Files) == 0 {
		return nil, errors.New("filesource: no files")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 1 << 20
	}
	s := &Source{cfg: cfg, committed: map[string]string{}}
	seen := map[string]bool{}
	for _, f := range cfg.Files {
		if seen[f] {
			return nil, fmt.Errorf("filesource: %s twice", f)
		}
		seen[f] = true
		s.parts = append(s.parts, &part{name: f})
	}
	return s, nil
}

// Start records the handler; the files are assigned at the first Poll.
func (s *Source) Start(ctx context.Context, h sink.Handler) error {
	s.h = h
	return nil
}

// Poll assigns every file at its first call, then returns up to Batch
// records taken round-robin from the files; io.EOF once every file is read
// to its end.
func (s *Source) Poll(ctx context.Context) ([]sink.Record, error) {
	if !s.assigned {
		pos, err := s.h.Assigned(ctx, slicesOf(s.parts))
		if err != nil {
			return nil, err
		}
		s.assigned = true
		all := map[string]string{}
		for _, p := range s.parts {
			all[p.name] = pos[p.name]
		}
		if err := s.Seek(ctx, all); err != nil {
			return nil, err
		}
	}
	var out []sink.Record
	batch := s.cfg.Batch
	if s.limit > 0 {
		batch = min(batch, s.limit)
	}
	per := max(1, batch/len(s.parts))
	for i := 0; i < len(s.parts) && len(out) < batch; i++ {
		p := s.parts[(s.rr+i)%len(s.parts)]
		for n := 0; n < per && len(out) < batch && !p.eof; n++ {
			rec, ok, err := s.next(p)
			if err != nil {
				return out, err
			}
			if ok {
				out = append(out, rec)
			}
		}
	}
	s.rr = (s.rr + 1) % len(s.parts)
	if len(out) == 0 {
		for _, p := range s.parts {
			if !p.eof {
				return nil, nil
			}
		}
		return nil, io.EOF
	}
	return out, nil
}

// next reads one line of p; ok is false for an empty line or the end. A
// last line without its line break is left unread (p.partial says how
// long it is): it may be half of a line still being written, and the
// position must not pass it.
func (s *Source) next(p *part) (sink.Record, bool, error) {
	var line []byte
	for {
		chunk, err := p.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > s.cfg.MaxLine {
			return sink.Record{}, false, fmt.Errorf("filesource: %s: a line at offset %d is longer than %d bytes", p.name, p.off, s.cfg.MaxLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			p.eof, p.partial = true, int64(len(line))
			return sink.Record{}, false, nil
		} else if err != nil {
			return sink.Record{}, false, fmt.Errorf("filesource: %s: %w", p.name, err)
		}
		break
	}
	p.off += int64(len(line))
	value := bytes.TrimRight(line, "\r\n")
	if len(bytes.TrimSpace(value)) == 0 {
		return sink.Record{}, false, nil
	}
	return sink.Record{Partition: p.name, Next: strconv.FormatInt(p.off, 10), Value: value}, true, nil
}

// Unterminated returns, per file whose end was reached and which ends in
// a line without its line break, that line's offset and length: it was
// not read (see the package comment).
func (s *Source) Unterminated() map[string][2]int64 {
	out := map[string][2]int64{}
	for _, p := range s.parts {
		if p.eof && p.partial > 0 {
			out[p.name] = [2]int64{p.off, p.partial}
		}
	}
	return out
}

// Seek positions each file of positions at its byte offset ("" : 0).
func (s *Source) Seek(ctx context.Context, positions map[string]string) error {
	for name, pos := range positions {
		var p *part
		for _, q := range s.parts {
			if q.name == name {
				p = q
			}
		}
		if p == nil {
			return fmt.Errorf("filesource: no partition %q", name)
		}
		var off int64
		if pos != "" {
			var err error
			off, err = strconv.ParseInt(pos, 10, 64)
			if err != nil || off < 0 {
				return fmt.Errorf("filesource: %s: bad position %q", name, pos)
			}
		}
		if p.f == nil {
			f, err := os.Open(p.name)
			if err != nil {
				return fmt.Errorf("filesource: %w", err)
			}
			p.f = f
		}
		if _, err := p.f.Seek(off, io.SeekStart); err != nil {
			return fmt.Errorf("filesource: %s: %w", name, err)
		}
		p.r = bufio.NewReaderSize(p.f, 64<<10)
		p.off, p.eof, p.partial = off, false, 0
	}
	return nil
}

// Committed remembers the positions (see Acknowledged).
func (s *Source) Committed(ctx context.Context, positions map[string]string) error {
	maps.Copy(s.committed, positions)
	return nil
}

// Acknowledged returns the positions the sink reported committed.
func (s *Source) Acknowledged() map[string]string { return maps.Clone(s.committed) }

// Close closes the files.
func (s *Source) Close() error {
	var errs []error
	for _, p := range s.parts {
		if p.f != nil {
			errs = append(errs, p.f.Close())
			p.f = nil
		}
	}
	return errors.Join(errs...)
}

func slicesOf(ps []*part) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.name
	}
	return out
}

// Remaining returns how many records the file at path holds past position
// (a position of this source: the byte offset just past a record's line;
// "": the file's start), as the source would read them now: its non-empty
// lines from there to the end, not counting a last line without its line
// break (not a record yet). It reads the file from the position on.
func Remaining(path, position string) (int64, error) {
	var off int64
	if position != "" {
		var err error
		off, err = strconv.ParseInt(position, 10, 64)
		if err != nil || off < 0 {
			return 0, fmt.Errorf("filesource: %s: bad position %q", path, position)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("filesource: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, fmt.Errorf("filesource: %s: %w", path, err)
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var n int64
	content := false // the line read so far holds more than white space
	for {
		chunk, err := r.ReadSlice('\n')
		content = content || len(bytes.TrimSpace(chunk)) > 0
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			return n, nil // an unterminated last line is no record yet
		}
		if err != nil {
			return 0, fmt.Errorf("filesource: %s: %w", path, err)
		}
		if content {
			n++
		}
		content = false
	}
}
