package xa_test

import (
	"context"
	"errors"
	"testing"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

// identified is an in-memory participant whose database has an identity.
type identified struct {
	*memrm.RM
	id xa.StoreIdentity
}

func (r identified) Identity() (xa.StoreIdentity, error) { return r.id, nil }

func newStoreID(t *testing.T, where string) xa.StoreIdentity {
	t.Helper()
	id, err := xa.NewStoreID()
	if err != nil {
		t.Fatal(err)
	}
	return xa.StoreIdentity{ID: id, Where: where}
}

// The coordinator records every participant's identity in the log before
// it prepares anything there. A manager whose participant of the same name
// reaches another database (its DSN changed) is refused before anything is
// prepared: its decisions would name a participant whose recorded database
// is another, and recovery would act on neither correctly.
func TestCoordinatorRecordsParticipantIdentity(t *testing.T) {
	ctx := context.Background()
	log := memrm.NewLog("n1")
	bank, staging := newStoreID(t, "bank"), newStoreID(t, "staging")
	myDB, pgDB, stagingDB := memrm.NewDB(), memrm.NewDB(), memrm.NewDB()
	my := identified{memrm.New("maria", myDB, nil), newStoreID(t, "maria")}
	run := func(pg xa.ResourceManager) error {
		mgr, err := xa.NewManager(xa.Config{Node: "n1", Log: log})
		if err != nil {
			t.Fatal(err)
		}
		_, err = mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
			for i, rm := range []xa.ResourceManager{my, pg} {
				s, err := tx.Enlist(ctx, rm)
				if err != nil {
					return err
				}
				if err := s.(*memrm.Branch).Put(ctx, i, i); err != nil {
					return err
				}
			}
			return nil
		})
		return err
	}
	if err := run(identified{memrm.New("pg", pgDB, nil), bank}); err != nil {
		t.Fatal(err)
	}
	ps, err := log.Participants(ctx)
	if err != nil || len(ps) != 2 || ps[1].Name != "pg" || !ps[1].Identity.Same(bank) {
		t.Fatalf("Participants = %+v, %v; want maria and pg (%s)", ps, err, bank)
	}
	writes := log.Writes
	err = run(identified{memrm.New("pg", stagingDB, nil), staging})
	var ie *xa.IdentityError
	if !errors.Is(err, xa.ErrAborted) || !errors.As(err, &ie) || !ie.Expected.Same(bank) || !ie.Found.Same(staging) {
		t.Fatalf("a transaction on another database under the name pg: %v; want aborted with an *xa.IdentityError", err)
	}
	if len(stagingDB.Prepared())+len(myDB.Prepared()) != 0 || log.Writes != writes {
		t.Fatalf("prepared %v %v, %d commit records written; want nothing", stagingDB.Prepared(), myDB.Prepared(), log.Writes-writes)
	}
	if _, ok := stagingDB.Get(1); ok {
		t.Fatal("the staging database holds the transaction's row")
	}
}

func TestParticipantRecordRoundTrip(t *testing.T) {
	p := xa.ParticipantRecord{Name: "pg", Identity: newStoreID(t, "PostgreSQL database bank")}
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var q xa.ParticipantRecord
	if err := q.UnmarshalBinary(b); err != nil || q != p {
		t.Fatalf("round trip: %+v, %v; want %+v", q, err, p)
	}
	for i := range b {
		if err := q.UnmarshalBinary(b[:i]); !errors.Is(err, xa.ErrCorruptRecord) {
			t.Fatalf("cut at %d: %v; want ErrCorruptRecord", i, err)
		}
	}
	if _, err := (xa.ParticipantRecord{Name: "pg", Identity: xa.StoreIdentity{ID: "NOT-HEX"}}).MarshalBinary(); err == nil {
		t.Fatal("a malformed store id was encoded")
	}
}
