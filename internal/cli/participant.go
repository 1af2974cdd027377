package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/drivers"
	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/xa"
)

func newParticipant(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "participant",
		Short: "Set participants up: their identities and decision tables",
	}
	cmd.AddCommand(newParticipantInit(g))
	return cmd
}

type participantInitView struct {
	Participant   string `json:"participant"`
	Identity      string `json:"identity,omitempty"`
	Where         string `json:"where,omitempty"`
	DecisionTable string `json:"decision_table,omitempty"`
	TableIdentity string `json:"decision_table_identity,omitempty"`
	// Log says how the decision log's record compares: "recorded",
	// "not recorded yet", "no log", or the mismatch.
	Log   string `json:"log"`
	Error string `json:"error,omitempty"`
}

func newParticipantInit(g *globals) *cobra.Command {
	var adopt bool
	cmd := &cobra.Command{
		Use:   "init [NAME...]",
		Short: "Give participants their identity, and create their decision tables",
		Long: `Set up the configured participants (all, or those named): write the
participant's identity into its database when it has none — a random id in a
one-row table (xa_participant; PostgreSQL: identity_table, found through the
role's search_path) — and create its decision table (decision_table:) with
an identity of its own when missing. Run it once per participant, as a role
that may create tables there; it changes nothing where both exist.

Why: recovery trusts a decision, and the absence of a branch or of a
decision, only from the store that made it. The transaction manager records
every participant's identity (and its decision table's) in the decision log
before it prepares a branch there; recovery and xactl then act on a
participant only while it answers with that identity. A configuration that
reaches another database (another database of the server, a staging copy, a
replica, another schema on the search path) is refused with what was
expected, what answered, and the fix, instead of listing nothing and having
a commit record forgotten or a committed transaction presumed aborted.
Recovery never creates an identity or a decision table; this command (or the
application's driver configuration, Init) is the only way one is made.

PostgreSQL anchors the identity to the database it was made in (the
cluster's system identifier and the database's oid): a dump restored
elsewhere carries the row but is refused as a copy. After pg_upgrade (the
same data in a new cluster, which needs no prepared transaction left),
--adopt re-anchors the existing identity to the database that answers.

For each participant it says whether the decision log (when configured)
recorded this identity already, not yet (no transaction prepared a branch
there since the log exists), or another one.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.loadConfig(config.Need{Participants: true})
			if err != nil {
				return err
			}
			for _, a := range args {
				if !slices.ContainsFunc(c.Participants, func(p config.Participant) bool { return p.Name == a }) {
					return usageErr("participant %q is not configured", a)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			logger := g.logger()
			recorded, delegated, logErr := logIdentities(ctx, c, g)
			var out []participantInitView
			failed := 0
			for _, pc := range c.Participants {
				if len(args) > 0 && !slices.Contains(args, pc.Name) {
					continue
				}
				v := participantInitView{Participant: pc.Name}
				lost := lostIdentity(ctx, pc, recorded, logger)
				err := tableForUntabledDelegation(ctx, pc, delegated, logger, adopt)
				var p *participant
				if err == nil {
					p, err = openParticipantWith(ctx, pc, logger, drivers.Options{Init: true, Adopt: adopt})
				}
				if err != nil {
					v.Error = explainConnErr(err).Error()
					failed++
					out = append(out, v)
					continue
				}
				if idf, ok := p.rm.(xa.Identified); ok {
					if id, err := idf.Identity(); err == nil {
						v.Identity, v.Where = id.ID, id.Where
					}
				}
				var table xa.StoreIdentity
				if dt, ok := p.rm.(xa.DecisionTable); ok && pc.DecisionTable != "" {
					name, id, err := dt.DecisionTableIdentity()
					if err == nil {
						v.DecisionTable, v.TableIdentity, table = name, id.ID, id
					}
				}
				p.close()
				switch {
				case logErr != nil:
					v.Log = "not compared: " + logErr.Error()
				case recorded == nil:
					v.Log = "no decision log configured"
				default:
					v.Log = compareRecorded(pc.Name, v.Identity, recorded, table, delegated)
					if r := recorded[pc.Name]; lost && v.Identity != r.Identity.ID && strings.HasPrefix(v.Log, mismatch) {
						v.Log += fmt.Sprintf(" -- this run made the identity %s: the database had none. If it is the recorded database and its identity row "+
							"was lost, restore the recorded id (UPDATE xa_participant SET id = '%s', in the identity table this participant uses) "+
							"and it is the recorded participant again; the decision log refuses any other id under this name", v.Identity, r.Identity.ID)
					}
				}
				out = append(out, v)
			}
			err = g.out.result(out, func(w io.Writer) {
				for _, v := range out {
					if v.Error != "" {
						fmt.Fprintf(w, "%s: FAILED: %s\n", v.Participant, v.Error)
						continue
					}
					fmt.Fprintf(w, "%s: identity %s (%s)\n", v.Participant, v.Identity, v.Where)
					if v.DecisionTable != "" {
						fmt.Fprintf(w, "  decision table %s, identity %s\n", v.DecisionTable, v.TableIdentity)
					}
					fmt.Fprintf(w, "  decision log: %s\n", v.Log)
				}
			})
			if err != nil {
				return err
			}
			if failed > 0 {
				return &exitError{code: ExitError, err: fmt.Errorf("%s could not be set up", plural(failed, "participant"))}
			}
			for _, v := range out {
				if strings.HasPrefix(v.Log, mismatch) {
					return &exitError{code: ExitInDoubt, err: errors.New("a participant is not the store the decision log recorded under its name (see above)")}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&adopt, "adopt", false, "PostgreSQL: re-anchor an existing identity to the database that answers (after pg_upgrade)")
	return cmd
}

// lostIdentity reports whether pc's database has no identity while the
// decision log records one under its name: either its identity row was
// lost (a tool dropped the table, a restore left it out), or the name
// reaches another database. Init then makes a new id, which the log
// refuses under this name for ever; the operator is told how to restore
// the recorded one.
func lostIdentity(ctx context.Context, pc config.Participant, recorded map[string]xa.ParticipantRecord, log *slog.Logger) bool {
	if _, ok := recorded[pc.Name]; !ok {
		return false
	}
	bare := pc
	bare.DecisionTable = ""
	p, err := openParticipantWith(ctx, bare, log, drivers.Options{})
	if err == nil {
		p.close()
		return false
	}
	var ie *xa.IdentityError
	return errors.As(err, &ie) && ie.Found.ID == ""
}

// tableForUntabledDelegation refuses to create pc's decision table when
// the decision log delegated decisions to the participant before decision
// tables had identities (a delegation that names no table) and no table is
// found under the configured name as this role sees it. The decisions of
// those transactions are in the table the application used, which recovery
// cannot tell from another by a recorded identity: a new, empty table
// created here would answer "no decision" for them, and recovery would
// presume abort of transactions the last resource committed. A table that
// exists (without its identity row: made by the earlier version) is given
// its identity by the caller, as for any participant.
func tableForUntabledDelegation(ctx context.Context, pc config.Participant, delegated map[string]xa.Delegation, log *slog.Logger, adopt bool) error {
	d, ok := delegated[pc.Name]
	if !ok || d.TableID != "" || pc.DecisionTable == "" {
		return nil
	}
	// The participant's own identity first (the table is looked for
	// only once the participant is known): the explicit act this
	// command is, for the participant.
	bare := pc
	bare.DecisionTable = ""
	p, err := openParticipantWith(ctx, bare, log, drivers.Options{Init: true, Adopt: adopt})
	if err != nil {
		return err
	}
	p.close()
	p, err = openParticipantWith(ctx, pc, log, drivers.Options{})
	if err == nil {
		p.close()
		return nil
	}
	if !errors.Is(err, drivers.ErrNoDecisionTable) {
		return nil // it exists; Init gives it its identity, or says why not
	}
	return fmt.Errorf("not creating decision table %s: the decision log delegated decisions to this participant's decision table "+
		"before decision tables had identities (the delegation names no table), and no table %s is found as this role sees it: "+
		"the decisions of those transactions are in the table the application used, and a new, empty one would say \"no decision\" "+
		"for them (fix: give decision_table schema-qualified, as the application's role resolves it, or connect as that role; "+
		"xactl log dump lists the delegation)", pc.DecisionTable, pc.DecisionTable)
}

// errNoLog: no decision log to compare with.
var errNoLog = errors.New("no decision log")

// mismatch starts what compareRecorded says of a store that is not the one
// recorded.
const mismatch = "MISMATCH"

// logIdentities reads the decision log's participant records and
// delegations, when a log is configured (read-only, beside a running
// transaction manager). Both nil, and a nil error, without a log.
func logIdentities(ctx context.Context, c *config.Config, g *globals) (map[string]xa.ParticipantRecord, map[string]xa.Delegation, error) {
	if c.Log.Dir == "" && c.Log.Kind == config.LogFile {
		return nil, nil, nil
	}
	log, err := openDecisionLog(c, readOnly, g.logger())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errNoLog, err)
	}
	defer log.Close()
	ps, err := log.Participants(ctx)
	if err != nil {
		return nil, nil, err
	}
	ds, err := log.Delegations(ctx)
	if err != nil {
		return nil, nil, err
	}
	recorded := map[string]xa.ParticipantRecord{}
	for _, p := range ps {
		recorded[p.Name] = p
	}
	delegated := map[string]xa.Delegation{}
	for _, d := range ds {
		delegated[d.Participant] = d
	}
	return recorded, delegated, nil
}

// compareRecorded says how a participant's identity (and its decision
// table's) compares with the decision log's records.
func compareRecorded(name, id string, recorded map[string]xa.ParticipantRecord, table xa.StoreIdentity, delegated map[string]xa.Delegation) string {
	out := "not recorded yet"
	if r, ok := recorded[name]; ok {
		if r.Identity.ID != id {
			return fmt.Sprintf("%s: the log recorded identity %s under this name: this is another database", mismatch, r.Identity)
		}
		out = "recorded"
	}
	if d, ok := delegated[name]; ok && d.TableID != "" && d.TableID != table.ID {
		return fmt.Sprintf("%s: the log delegated decisions to table %s (identity %s), not to this one", mismatch, d.Table, d.TableID)
	}
	return out
}
