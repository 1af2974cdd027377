package recovery

import (
	"context"
	"fmt"

	"github.com/xadb/xa/xa"
)

// identities is what the scanner learned about the stores that answer
// under the configured names (docs/protocol.md, "Identity"): a decision,
// and the absence of a branch or of a decision, is trusted only from the
// store the decision log recorded under that name.
type identities struct {
	// participants maps a configured participant whose database is not
	// the one the log recorded under its name (or that cannot say which
	// it is) to why: nothing on it is listed or acted on.
	participants map[string]error
	// tables maps a configured decision store whose table is not the one
	// the log delegated to (or that has none) to why: it is not read, and
	// presumed abort waits for the recorded one.
	tables map[string]error
}

// checkIdentities compares every configured participant, and every
// decision table the log delegated to, with what the log recorded.
func (s *Scanner) checkIdentities(ctx context.Context) (identities, error) {
	ids := identities{participants: map[string]error{}, tables: map[string]error{}}
	recs, err := s.cfg.Log.Participants(ctx)
	if err != nil {
		return ids, fmt.Errorf("recovery: reading the decision log's participant records: %w", err)
	}
	recorded := map[string]xa.ParticipantRecord{}
	for _, r := range recs {
		recorded[r.Name] = r
	}
	for _, rm := range s.cfg.Participants {
		if err := participantIdentity(rm, recorded); err != nil {
			ids.participants[rm.Name()] = err
		}
	}
	delegations, err := s.cfg.Log.Delegations(ctx)
	if err != nil {
		return ids, fmt.Errorf("recovery: reading the decision log's delegations: %w", err)
	}
	for _, d := range delegations {
		rm := s.participant(d.Participant)
		if rm == nil || d.TableID == "" || ids.participants[d.Participant] != nil {
			continue
		}
		if _, ok := xa.AsDecisionStore(rm); !ok {
			continue
		}
		if err := tableIdentity(rm, d); err != nil {
			ids.tables[d.Participant] = err
		}
	}
	return ids, nil
}

// recheckParticipants reads the log's participant records again and
// returns the configured participants, fit when ids was made, that are not
// the recorded stores now (a participant recorded since, for the first
// time).
func (s *Scanner) recheckParticipants(ctx context.Context, ids identities) (map[string]error, error) {
	recs, err := s.cfg.Log.Participants(ctx)
	if err != nil {
		return nil, fmt.Errorf("recovery: reading the decision log's participant records: %w", err)
	}
	recorded := map[string]xa.ParticipantRecord{}
	for _, r := range recs {
		recorded[r.Name] = r
	}
	out := map[string]error{}
	for _, rm := range s.cfg.Participants {
		if ids.participants[rm.Name()] != nil {
			continue
		}
		if err := participantIdentity(rm, recorded); err != nil {
			out[rm.Name()] = err
		}
	}
	return out, nil
}

// participantIdentity says why rm may not be acted on, or nil: it answers
// with the identity the log recorded under its name, or the log recorded
// none (a participant no transaction of this log prepared a branch on, or
// a log written before identities).
func participantIdentity(rm xa.ResourceManager, recorded map[string]xa.ParticipantRecord) error {
	rec, ok := recorded[rm.Name()]
	if !ok {
		return nil
	}
	store := fmt.Sprintf("participant %q", rm.Name())
	idf, ok := rm.(xa.Identified)
	if !ok {
		return &xa.IdentityError{Store: store, Expected: rec.Identity,
			Why: "the decision log recorded the database under this name, and this participant cannot tell which database it is",
			Fix: "open the participant with a driver that reads its identity"}
	}
	id, err := idf.Identity()
	if err != nil {
		return err
	}
	if !rec.Identity.Same(id) {
		return &xa.IdentityError{Store: store, Expected: rec.Identity, Found: id,
			Why: "another database answers under this name than the one the decision log recorded: what it lists, " +
				"and what it does not, says nothing about the branches of the recorded one",
			Fix: "point the participant at the recorded database (its DSN: host, port, database, role)"}
	}
	return nil
}

// tableIdentity says why the decision table of rm is not the one d
// delegated to, or nil.
func tableIdentity(rm xa.ResourceManager, d xa.Delegation) error {
	store := fmt.Sprintf("decision table of participant %q", d.Participant)
	expected := xa.StoreIdentity{ID: d.TableID, Where: d.Table}
	dt, ok := rm.(xa.DecisionTable)
	if !ok {
		return &xa.IdentityError{Store: store, Expected: expected,
			Why: "the decision log delegated decisions to a table with an identity, and this participant cannot tell its table's"}
	}
	table, id, err := dt.DecisionTableIdentity()
	if err != nil {
		return err
	}
	if id.ID != d.TableID {
		return &xa.IdentityError{Store: store, Expected: expected, Found: xa.StoreIdentity{ID: id.ID, Where: table},
			Why: fmt.Sprintf("the configured decision table resolves to %s, not to the table the decision log delegated to (%s): "+
				"the transactions' decisions may be there, and a table without them would say \"no decision\"", table, d.Table),
			Fix: fmt.Sprintf("configure decision_table as %s (schema-qualified), or connect as the role whose search_path finds it", d.Table)}
	}
	return nil
}
