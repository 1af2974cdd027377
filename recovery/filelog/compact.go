package filelog

import (
	"fmt"
	"path/filepath"
)

// rotate closes the active segment (already synced) and starts the next
// one, whose link record gives the closed segment's length, then compacts
// and writes HEAD. It runs on the writer goroutine.
func (l *Log) rotate() error {
	// Only the last segment may end in a torn write or zeros: cut the
	// preallocated space and sync forget records written without a sync
	// before the segment is closed for good. Its length is final then.
	if err := l.trim(); err != nil {
		return err
	}
	next := l.activeNum + 1
	f, err := l.createSegment(next, &Link{Segment: l.activeNum, Size: l.activeSize})
	if err != nil {
		return err
	}
	start := int64(headerSize + frameHeader + linkPayload)
	if err := l.active.Close(); err != nil {
		// Its data was synced before; a close error loses nothing.
		l.logger.Warn("decision log: closing full segment", "file", segmentName(l.activeNum), "err", err)
	}
	l.closeSlots()
	l.active, l.activeNum, l.activeSize, l.allocated = f, next, start, start
	l.activeVersion, l.durable, l.marked = formatVersion, start, start
	l.writes, l.syncedWrites = 0, 0
	if err := l.openSlots(); err != nil {
		return err
	}
	l.mu.Lock()
	l.st.seg(next).size = start
	l.mu.Unlock()
	return l.compact()
}

// compact retires old segments: it copies their live records into the
// active segment, syncs, writes HEAD (naming the active segment as the
// newest, and the first segment kept as the first), and only then removes
// them, oldest first, syncing the directory after each removal so that a
// crash never leaves a gap. It runs on the writer goroutine, after each
// rotation: HEAD is written even when nothing is retired.
func (l *Log) compact() error {
	l.mu.Lock()
	first, head := l.first, l.head
	retire, copies := l.st.plan(first, l.activeNum, l.opts.SegmentSize)
	l.mu.Unlock()
	if len(copies) > 0 {
		l.buf = l.buf[:0]
		for _, r := range copies {
			l.buf = append(l.buf, r.frame...)
		}
		if err := l.append(l.buf); err != nil {
			return fmt.Errorf("copying %d live records forward: %w", len(copies), err)
		}
		if err := l.sync(); err != nil {
			return fmt.Errorf("copying %d live records forward: %w", len(copies), err)
		}
		l.mu.Lock()
		for _, r := range copies {
			// A record forgotten meanwhile has left its segment's
			// accounting already; its copy is dead.
			if !r.dead {
				l.st.move(r, l.activeNum)
			}
		}
		l.st.seg(l.activeNum).size += int64(len(l.buf))
		l.mu.Unlock()
		// The originals go once HEAD is written: mark the copies as
		// synced first, so that damage to them reads as lost data, not
		// as a torn tail cut off with the live records it holds.
		if err := l.markDurable(); err != nil {
			return fmt.Errorf("marking %d live records copied forward: %w", len(copies), err)
		}
	}
	// Segments below HEAD's first may be missing after a crash; from it
	// on they may not. A removal that failed before leaves segments below
	// it, which is sound.
	h := Head{Newest: l.activeNum, First: max(first, head.First)}
	if len(retire) > 0 {
		h.First = max(h.First, retire[len(retire)-1]+1)
	}
	if err := l.writeHead(h); err != nil {
		return err
	}
	if len(retire) == 0 {
		return nil
	}
	for _, n := range retire {
		name := segmentName(n)
		if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
			// Nothing is lost: its records are copied forward or dead,
			// and the next compaction tries again.
			l.logger.Warn("decision log: removing old segment", "file", name, "err", err)
			return nil
		}
		if !l.opts.NoSync {
			if err := l.fs.SyncDir(l.dir); err != nil {
				// The removal may or may not be durable; a later
				// removal that is could leave a gap.
				return fmt.Errorf("syncing directory after removing %s: %w", name, err)
			}
		}
		l.mu.Lock()
		delete(l.st.segs, n)
		l.first = n + 1
		l.mu.Unlock()
	}
	l.logger.Debug("decision log: compacted", "removed", len(retire), "copied", len(copies),
		"first", l.first, "active", l.activeNum)
	return nil
}
