package filelog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/xadb/xa/xa"
)

// view is the live state of a log, as sorted encodings, for comparison.
type view struct {
	commits, aborts, delegations, heuristics []string
}

func (v view) equal(w view) bool {
	return slices.Equal(v.commits, w.commits) && slices.Equal(v.aborts, w.aborts) &&
		slices.Equal(v.delegations, w.delegations) && slices.Equal(v.heuristics, w.heuristics)
}

func (v view) String() string {
	return fmt.Sprintf("%d commits, %d aborts, %d delegations, %d heuristics", len(v.commits), len(v.aborts), len(v.delegations), len(v.heuristics))
}

func delegationKey(d xa.Delegation) string {
	return fmt.Sprintf("%s@%d", d.Participant, d.Logged.UnixNano())
}

func (v *view) sort() {
	slices.Sort(v.commits)
	slices.Sort(v.aborts)
	slices.Sort(v.delegations)
	slices.Sort(v.heuristics)
}

// viewOf reads the live state of any log through xa.RecoveryLog, checking
// the orders the contract promises.
func viewOf(t tb, l xa.RecoveryLog) view {
	t.Helper()
	ctx := context.Background()
	var v view
	cs, err := l.Commits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if i > 0 && c.Logged.Before(cs[i-1].Logged) {
			t.Fatalf("Commits not oldest first")
		}
		v.commits = append(v.commits, enc(t, c))
		if r, ok, err := l.Lookup(ctx, c.ID); err != nil || !ok || enc(t, r) != enc(t, c) {
			t.Fatalf("Lookup(%v) disagrees with Commits: %v, %v", c.ID, ok, err)
		}
	}
	as, err := l.Aborts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range as {
		if i > 0 && a.Logged.Before(as[i-1].Logged) {
			t.Fatalf("Aborts not oldest first")
		}
		v.aborts = append(v.aborts, enc(t, a))
		if r, ok, err := l.LookupAbort(ctx, a.ID); err != nil || !ok || enc(t, r) != enc(t, a) {
			t.Fatalf("LookupAbort(%v) disagrees with Aborts: %v, %v", a.ID, ok, err)
		}
	}
	ds, err := l.Delegations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		v.delegations = append(v.delegations, delegationKey(d))
	}
	hs, err := l.Heuristics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		if i > 0 && h.Time.Before(hs[i-1].Time) {
			t.Fatalf("Heuristics not oldest first")
		}
		v.heuristics = append(v.heuristics, enc(t, h))
	}
	v.sort()
	return v
}

// dumpView is the live state as Dump's Live flags say.
func dumpView(t tb, dir string) view {
	t.Helper()
	var v view
	idents := 0
	if err := Dump(dir, func(e Entry) error {
		if !e.Live {
			return nil
		}
		switch e.Type {
		case RecordIdentity:
			idents++
		case RecordCommit:
			v.commits = append(v.commits, enc(t, e.Commit))
		case RecordAbort:
			v.aborts = append(v.aborts, enc(t, e.Abort))
		case RecordDelegation:
			v.delegations = append(v.delegations, delegationKey(e.Delegation))
		case RecordHeuristic:
			v.heuristics = append(v.heuristics, enc(t, e.Heuristic))
		default:
			t.Fatalf("Dump says a %v record is live", e.Type)
		}
		return nil
	}); err != nil {
		t.Fatalf("Dump: %v", err)
	}
	if idents != 1 {
		t.Fatalf("Dump shows %d identities", idents)
	}
	v.sort()
	return v
}

// TestModel: random sequences of commit, forget, abort, forget-abort,
// delegation, heuristic, clear, clock moves and reopen, with segments small
// enough to rotate and compact, match an in-memory model; and whenever the
// log is closed, ReadSnapshot, Dump's Live flags and a reopened log give
// that same live state.
func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		dir, err := os.MkdirTemp(t.TempDir(), "model")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		clock := newManualClock()
		opts := Options{NoSync: true, Now: clock.now, SegmentSize: rapid.SampledFrom([]int64{200, 1024, 1 << 20}).Draw(rt, "segmentSize")}
		l, err := Create(dir, testIdent, opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { l.Close() }()

		commits := map[string]xa.CommitRecord{}
		aborts := map[string]xa.AbortRecord{}
		delegations := map[string]xa.Delegation{}
		heuristics := map[hkey]map[string]bool{} // encoded records by participant and XID
		idGen := rapid.IntRange(0, 15)
		xidGen := rapid.IntRange(0, 5)
		rmGen := rapid.SampledFrom([]string{"a", "b"})
		var maxLive int64
		timeGen := rapid.Int64Range(1_600_000_000_000_000_000, 1_600_000_000_000_001_000)

		modelView := func() view {
			var v view
			for _, c := range commits {
				v.commits = append(v.commits, enc(rt, c))
			}
			for _, a := range aborts {
				v.aborts = append(v.aborts, enc(rt, a))
			}
			for _, d := range delegations {
				v.delegations = append(v.delegations, delegationKey(d))
			}
			for _, hs := range heuristics {
				for e := range hs {
					v.heuristics = append(v.heuristics, e)
				}
			}
			v.sort()
			return v
		}

		rt.Repeat(map[string]func(*rapid.T){
			"commit": func(rt *rapid.T) {
				id := gid(idGen.Draw(rt, "id"))
				rec := xa.CommitRecord{ID: id, Logged: time.Unix(0, timeGen.Draw(rt, "logged"))}
				for b := range rapid.IntRange(0, 3).Draw(rt, "branches") {
					rec.Branches = append(rec.Branches, xa.BranchRecord{
						RM: fmt.Sprintf("rm%d", b), XID: id.Branch(b),
						Origin: xa.Origin{Session: rapid.Uint64().Draw(rt, "session")},
					})
				}
				err := l.LogCommit(ctx, rec)
				_, aborted := aborts[id.String()]
				late := clock.now().After(id.Begun.Add(testIdent.Timeout))
				switch {
				case aborted:
					if !errors.Is(err, xa.ErrAbortRecorded) {
						rt.Fatalf("LogCommit of an aborted id: %v", err)
					}
				case late:
					if !errors.Is(err, xa.ErrDecisionTooLate) {
						rt.Fatalf("LogCommit too late: %v", err)
					}
				case err != nil:
					rt.Fatal(err)
				default:
					commits[id.String()] = rec
				}
			},
			"forget": func(rt *rapid.T) {
				id := gid(idGen.Draw(rt, "id"))
				if err := l.Forget(ctx, id); err != nil {
					rt.Fatal(err)
				}
				delete(commits, id.String())
			},
			"abort": func(rt *rapid.T) {
				id := gid(idGen.Draw(rt, "id"))
				err := l.LogAbort(ctx, xa.AbortRecord{ID: id, Reason: rapid.StringN(0, 10, -1).Draw(rt, "reason")})
				k := id.String()
				switch _, committed := commits[k]; {
				case committed:
					if !errors.Is(err, xa.ErrCommitRecorded) {
						rt.Fatalf("LogAbort of a committed id: %v", err)
					}
				case err != nil:
					rt.Fatal(err)
				default:
					if _, ok := aborts[k]; !ok {
						a, _, _ := l.LookupAbort(ctx, id)
						if !a.Logged.Equal(clock.now()) {
							rt.Fatalf("abort logged at %v, the log's clock says %v", a.Logged, clock.now())
						}
						aborts[k] = a
					}
				}
			},
			"forget-abort": func(rt *rapid.T) {
				id := gid(idGen.Draw(rt, "id"))
				err := l.ForgetAbort(ctx, id)
				k := id.String()
				a, ok := aborts[k]
				switch {
				case ok && clock.now().Before(a.KeptUntil(testIdent.Timeout)):
					if !errors.Is(err, ErrRetained) {
						rt.Fatalf("ForgetAbort within the retention: %v", err)
					}
				case err != nil:
					rt.Fatal(err)
				default:
					delete(aborts, k)
				}
			},
			"delegation": func(rt *rapid.T) {
				p := rmGen.Draw(rt, "participant")
				if err := l.LogDelegation(ctx, xa.Delegation{Participant: p}); err != nil {
					rt.Fatal(err)
				}
				if _, ok := delegations[p]; !ok {
					delegations[p] = xa.Delegation{Participant: p, Logged: clock.now()}
				}
			},
			"heuristic": func(rt *rapid.T) {
				h := xa.HeuristicRecord{
					RM:     rmGen.Draw(rt, "rm"),
					XID:    gid(xidGen.Draw(rt, "xid")).Branch(0),
					Action: rapid.SampledFrom([]xa.Outcome{xa.OutcomeCommit, xa.OutcomeRollback}).Draw(rt, "action"),
					Forced: rapid.Bool().Draw(rt, "forced"),
					Time:   time.Unix(0, timeGen.Draw(rt, "time")),
					Reason: rapid.StringN(0, 20, -1).Draw(rt, "reason"),
				}
				if err := l.LogHeuristic(ctx, h); err != nil {
					rt.Fatal(err)
				}
				k := hkey{h.RM, h.XID.String()}
				if heuristics[k] == nil {
					heuristics[k] = map[string]bool{}
				}
				heuristics[k][enc(rt, h)] = true
			},
			"clear": func(rt *rapid.T) {
				rm := rmGen.Draw(rt, "rm")
				x := gid(xidGen.Draw(rt, "xid")).Branch(0)
				if err := l.ClearHeuristic(ctx, rm, x); err != nil {
					rt.Fatal(err)
				}
				delete(heuristics, hkey{rm, x.String()})
			},
			"clock": func(rt *rapid.T) {
				clock.advance(rapid.SampledFrom([]time.Duration{time.Millisecond, time.Second, 20 * time.Second, xa.AbortRetention / 2}).Draw(rt, "advance"))
			},
			"reopen": func(rt *rapid.T) {
				if err := l.Close(); err != nil {
					rt.Fatal(err)
				}
				if l, err = Open(dir, opts); err != nil {
					rt.Fatal(err)
				}
			},
			"snapshot": func(rt *rapid.T) {
				// The same replay gives the same state, read-only or not.
				if err := l.Close(); err != nil {
					rt.Fatal(err)
				}
				want := modelView()
				s, err := ReadSnapshot(dir)
				if err != nil {
					rt.Fatalf("ReadSnapshot: %v", err)
				}
				if !sameIdentity(s.Identity(), testIdent) {
					rt.Fatalf("snapshot identity %+v", s.Identity())
				}
				if v := viewOf(rt, s); !v.equal(want) {
					rt.Fatalf("ReadSnapshot: %v; the model has %v", v, want)
				}
				if v := dumpView(rt, dir); !v.equal(want) {
					rt.Fatalf("Dump's live records: %v; the model has %v", v, want)
				}
				rep, err := Verify(dir)
				if err != nil || rep.LiveCommits != len(want.commits) || rep.LiveAborts != len(want.aborts) ||
					rep.Delegations != len(want.delegations) || rep.LiveHeuristics != len(want.heuristics) {
					rt.Fatalf("Verify: %v, %+v; the model has %v", err, rep, want)
				}
				if l, err = Open(dir, opts); err != nil {
					rt.Fatal(err)
				}
				if v := viewOf(rt, l); !v.equal(want) {
					rt.Fatalf("reopened: %v; the model has %v", v, want)
				}
			},
			"": func(rt *rapid.T) {
				want := modelView()
				if v := viewOf(rt, l); !v.equal(want) {
					rt.Fatalf("log: %v; the model has %v", v, want)
				}
				for i := range 16 {
					_, ok, err := l.Lookup(ctx, gid(i))
					_, wok := commits[gid(i).String()]
					if err != nil || ok != wok {
						rt.Fatalf("Lookup(%d) = %v, %v; model %v", i, ok, err, wok)
					}
					_, ok, err = l.LookupAbort(ctx, gid(i))
					_, wok = aborts[gid(i).String()]
					if err != nil || ok != wok {
						rt.Fatalf("LookupAbort(%d) = %v, %v; model %v", i, ok, err, wok)
					}
				}
				// Compaction keeps the segments within what the live
				// data needs (it runs on rotation, so allow for the
				// most live data there has been).
				var live int64
				for _, group := range [][]string{want.commits, want.aborts, want.heuristics} {
					for _, e := range group {
						live += int64(frameHeader + len(e))
					}
				}
				live += int64(len(want.delegations) * (frameHeader + 16))
				maxLive = max(maxLive, live)
				if n, _ := dirSize(rt, dir); n > minSegments+int(2*maxLive/opts.SegmentSize)+2 {
					rt.Fatalf("%d segments for at most %d live bytes", n, maxLive)
				}
			},
		})
	})
}
