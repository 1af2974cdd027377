/*
 * xa.pml: the commit protocol of docs/protocol.md (the fenced version) as a
 * Promela model for spin: one global transaction with NP branches (one per
 * participant), its coordinator, the participants' servers, the decision
 * log and a recovery scanner; crashes of the coordinator and of the
 * participants at any step, lost replies, and a scanner whose clock may be
 * skewed any way (it may find a branch "old enough" at any time).
 * docs/model.md says what is modelled and what is not, the configurations
 * and the counterexamples. Run it with model/check (or go test ./model).
 *
 * Knobs (-D on the spin command line):
 *   NP=2|3      participants: b0 MariaDB, b1 PostgreSQL (may have a decision
 *               table: the last resource), b2 MariaDB
 *   TRIES=n     phase-2 attempts per branch (Config.Phase2Attempts)
 *   LOSSES=n    lost replies (a decision-log write that fails or times out
 *               after its enqueue is always possible, and not counted)
 *   PCRASHES=n  crashes of participants; CCRASHES=0|1 of the coordinator
 *   GHOSTS=n    MariaDB fact 7: a commit from another session right after
 *               the preparing session closed answers success without
 *               committing, and XA RECOVER stops listing the branch until
 *               the server restarts (an operator restarts it)
 *   K0 K1 K2    fix what branch i does (K_IDLE, K_READER, K_WRITER), LRCAP=0|1
 *               whether b1 has a decision table; by default all are chosen
 *               nondeterministically at begin
 *   DETACHED    no MariaDB branch stays attached to its session after
 *               PREPARE (MySQL 8's xa_detach_on_prepare, or PostgreSQL only)
 *   SCANS=n     the termination run: n scans while faults may happen; then
 *               faults stop, and the coordinator and the servers must come
 *               to rest by themselves (a state where they cannot is an
 *               invalid end state); then recovery runs to the end
 *   REACH=G_..  a reachability probe: fails (as it should) once the events
 *               in the mask have happened; see the G_ constants
 *   MUT_...     a mutation, which must fail: see each #ifdef below and
 *               docs/model.md
 *   MUT_SOLE_LOST_TRUSTED  the machine before the model's second finding
 *               (docs/model.md): a mutation now
 *   NOHIDDEN    keeps the machine's scratch variables in the state (for a
 *               breadth-first search, pan -DBFS)
 * spin -t replays a counterexample and prints its events, one per line:
 * "C" the coordinator, "S0".."S2" the servers, "L" the log, "R" recovery.
 *
 * Names, model -> Go (xa/machine.go unless said otherwise):
 *   PH_ACTIVE PH_ONEPHASE PH_PREPARING PH_LOGGING PH_DECIDING PH_COMMITTING
 *   PH_ABORTING PH_DONE -> phaseActive ... phaseDone; PH_CRASHED: the
 *   process died (no Go name)
 *   B_ACTIVE B_PREPARING B_PREPARED B_MAYBE B_DONE B_COMMITTING
 *   B_ROLLINGBACK B_PENDING B_CHECKING -> bActive ... bChecking
 *   bs[i] att[i] via[i] lostc[i] acked[i] fate[i] -> branch.state .attempts
 *   .viaRM .lost .ackedRM .fate; F_COMMITTED F_ABORTED F_UNKNOWN ->
 *   fateCommitted fateAborted fateUnknown
 *   sole logged inRes last abortFlag res1 -> machine.sole .logged
 *   .inResource .last, .abort != nil, .result (one-phase)
 *   onCommit onVote onLogged onDecided onCommitted onLookedUp rolledBack
 *   startAbort rollbackIfNeeded commitAll undecided maybeFinishCommit
 *   maybeFinishAbort maybeFinishOnePhase finish -> the functions so named
 *   events: a reply in rep[i] is evVote while bs[i] == B_PREPARING, else
 *   evPhase2; the log steps are evLogged; the lookup step is evLookedUp;
 *   the rollback/timeout steps are evRollback and evTimeout
 *   requests: R_PREPARE actPrepare, R_ONEPHASE actOnePhase, R_LAST
 *   actCommitLast, R_COMMIT actCommit, R_ROLLBACK actRollback; via[i] is
 *   their viaRM (the request goes in rreq[i], from another session);
 *   logState = LS_REQ actLog; release() actRelease; forgetCommit() by the
 *   coordinator actForget; B_CHECKING actLookupAbort; finish() actFinish
 *   replies: P_OK nil, P_YES VotePrepared, P_RO VoteReadOnly, P_NO
 *   ErrRolledBack (a refusal), P_XID ErrUnknownXID, P_RETRY ErrRetryable,
 *   P_LOST ErrOutcomeUnknown; the "too late" steps are errTooLate; a
 *   refused LogCommit is ErrAbortRecorded, a refused LogAbort
 *   ErrCommitRecorded
 *   commitRec, abortRec: the log's COMMIT and ABORT records of the id
 *   (L_QUEUED: accepted, not yet durable) -> DecisionLog.LogCommit,
 *   RecoveryLog.LogAbort, LookupAbort, Forget, ForgetAbort (xa/log.go)
 *   drow: the row of the id in b1's decision table (a DecisionStore, and
 *   the ABORT marker of the fence)
 *   Scanner -> recovery.Scanner.scan: V_COMMIT Commit, V_ROLLBACK Rollback
 *   (presumed abort: the fence, takeFence), V_ABORTED Rollback of a branch
 *   whose abort is recorded (Branch.AbortLogged), a listed branch left
 *   alone is Wait; scanCommit/scanRollback are ResourceManager.Commit and
 *   Rollback by XID; the marker is DecisionStore.ClaimAbort; gh is
 *   GhostCounter.UnlistedPrepared
 *   told: what Tx.Commit returned: T_COMMITTED nil, T_ABORTED an
 *   *AbortError, T_UNKNOWN ErrOutcomeUnknown
 */

#ifndef NP
#define NP 2
#endif
#ifndef TRIES
#define TRIES 2
#endif
#ifndef LOSSES
#define LOSSES 1
#endif
#ifndef PCRASHES
#define PCRASHES 1
#endif
#ifndef CCRASHES
#define CCRASHES 1
#endif
#ifndef GHOSTS
#define GHOSTS 1
#endif

#define LR 1
#ifdef DETACHED
#define MARIA(i) 0
#else
#define MARIA(i) (((i) % 2) == 0)
#endif
#define NOLAST 9

/* a branch on its server */
#define S_ACTIVE     1
#define S_PREPARED   2
#define S_COMMITTED  3
#define S_ROLLEDBACK 4
#define S_READONLY   5   /* voted read-only: ended, no effect */

/* the coordinator's own session of a branch, as its server sees it */
#define CLOSED  0
#define OPEN    1
#define CLOSING 2        /* the client is gone; the server has not noticed */

/* requests */
#define R_PREPARE  1
#define R_COMMIT   2
#define R_ROLLBACK 3
#define R_ONEPHASE 4
#define R_LAST     5     /* one-phase commit with the decision row */

/* replies */
#define P_NONE  0
#define P_OK    1
#define P_YES   2
#define P_RO    3
#define P_NO    4
#define P_XID   5
#define P_RETRY 6
#define P_LOST  7

#define PH_ACTIVE     1
#define PH_ONEPHASE   2
#define PH_PREPARING  3
#define PH_LOGGING    4
#define PH_DECIDING   5
#define PH_COMMITTING 6
#define PH_ABORTING   7
#define PH_DONE       8
#define PH_CRASHED    9

#define B_ACTIVE      1
#define B_PREPARING   2
#define B_PREPARED    3
#define B_MAYBE       4
#define B_DONE        5
#define B_COMMITTING  6
#define B_ROLLINGBACK 7
#define B_PENDING     8
#define B_CHECKING    9

#define F_COMMITTED 0
#define F_ABORTED   2
#define F_UNKNOWN   3

#define T_NONE      0
#define T_COMMITTED 1
#define T_ABORTED   2
#define T_UNKNOWN   3

#define L_NONE    0
#define L_QUEUED  1
#define L_DURABLE 2

#define D_NONE   0
#define D_COMMIT 1
#define D_ABORT  2

#define LS_REQ  1     /* actLog issued, not yet in the log */
#define LS_WAIT 2     /* accepted (queued), waiting until it is durable */

#define K_IDLE   0    /* ran no statement (known at commit): votes read-only */
#define K_READER 1    /* ran statements, wrote nothing: votes read-only */
#define K_WRITER 2    /* wrote: votes prepared, or refuses */

/* ---- the servers ---- */
byte srv[NP];
bit  attached[NP];   /* MariaDB: prepared, still attached to its session */
bit  ghost[NP];      /* MariaDB: prepared, not listed by XA RECOVER (fact 7) */
byte sess[NP];
byte req[NP];        /* a request on the coordinator's own session */
bit  reqLost[NP];    /* its reply was lost already: the result goes nowhere */
byte rreq[NP];       /* a request from another session (viaRM) */
byte rep[NP];        /* a reply the coordinator has not read yet */
byte drow;

/* ---- ghosts, for the properties ---- */
byte kind[NP];
byte voted[NP];      /* what the server answered to prepare */
bit  needVote[NP];   /* commit needs this branch's yes */
bit  lrCap;          /* b1 has a decision table */
byte told;

/* ---- the decision log ---- */
byte commitRec;
byte abortRec;

/* ---- the coordinator (xa.machine) ---- */
byte phase;
byte bs[NP];
byte att[NP];
bit  via[NP];
bit  lostc[NP];
bit  acked[NP];
byte fate[NP];
bit  sole;
bit  logged;
bit  inRes;
bit  abortFlag;
byte last = NOLAST;
byte res1;
byte logState;

/* ---- faults ---- */
byte losses = LOSSES;
byte pcrash = PCRASHES;
byte ccrash = CCRASHES;
byte ghosts = GHOSTS;
bit  stop;           /* faults have stopped (crashes, lost replies, fact 7) */
bit  calm;           /* and recovery runs to the end, its clock past the grace */

/* scratch of the machine's steps, reset after each; not part of the state
 * (spin cannot search breadth-first with hidden variables: -DNOHIDDEN) */
#ifdef NOHIDDEN
#define HIDDEN
#else
#define HIDDEN hidden
#endif
HIDDEN byte k, w, n1, n2, r;
HIDDEN byte fin, pend, anyAck, unk, abt;

/* ---- reachability probes: events that the model must be able to produce */
#define G_REFUSED_AFTER_ROLLBACK 1  /* LogCommit refused (ErrAbortRecorded) after recovery rolled back every prepared branch */
#define G_LAST_FENCED            2  /* a last-resource commit hit the ABORT marker inserted while it was in flight */
#define G_MARKER_LOST            4  /* the marker insert found the COMMIT row: recovery commits instead */
#define G_SOLE_ABORTED           8  /* a sole commit answered "unknown XID" after recovery rolled it back; the caller is told aborted */
#define G_RETRY                 16  /* a commit from another session answered 1397 (still attached): retry */
#define G_ABORT_REFUSED         32  /* LogAbort refused (ErrCommitRecorded) */
#define G_RECOVERY_COMMITTED    64  /* recovery committed a branch by the record after the coordinator gave up on it */
#define G_FORGOT_ABORT         128  /* an ABORT record was forgotten */
#define G_LOST_COMMITTED       256  /* "unknown XID" after a lost commit reply read as committed */
#define G_GHOST_KEPT           512  /* a commit record kept because a participant holds unlisted prepared transactions */
#ifdef REACH
int seen;
#define SEEN(b) seen = seen | (b)
active proctype Reach()
{
end:	atomic { (seen & (REACH)) == (REACH) -> printf("reached %d\n", REACH); assert(false) }
}
#else
#define SEEN(b) skip
#endif

/* ---- properties ---- */
#define WC(i) (kind[i] == K_WRITER && srv[i] == S_COMMITTED)
#define WR(i) (kind[i] == K_WRITER && srv[i] == S_ROLLEDBACK)
#define VOTEOK(i) (!needVote[i] || voted[i] == P_YES || voted[i] == P_RO)
#define ENDED(i) (srv[i] == S_COMMITTED || srv[i] == S_ROLLEDBACK || srv[i] == S_READONLY)
#define NOTWC(i) (kind[i] != K_WRITER || srv[i] == S_COMMITTED)
#if NP == 2
#define ANYC (WC(0) || WC(1))
#define ANYR (WR(0) || WR(1))
#define ALLVOTED (VOTEOK(0) && VOTEOK(1))
#define ALLENDED (ENDED(0) && ENDED(1))
#define ALLWC (NOTWC(0) && NOTWC(1))
#define NOPREPARED (srv[0] != S_PREPARED && srv[1] != S_PREPARED)
#define QUIET (req[0] == 0 && req[1] == 0 && rreq[0] == 0 && rreq[1] == 0)
#define NOCLOSING (sess[0] != CLOSING && sess[1] != CLOSING)
#define NOGHOST (!ghost[0] && !ghost[1])
#define ALLROLLEDBACK ((srv[0] != S_PREPARED || kind[0] != K_WRITER) && (srv[1] != S_PREPARED || kind[1] != K_WRITER) && (WR(0) || WR(1)))
#else
#define ANYC (WC(0) || WC(1) || WC(2))
#define ANYR (WR(0) || WR(1) || WR(2))
#define ALLVOTED (VOTEOK(0) && VOTEOK(1) && VOTEOK(2))
#define ALLENDED (ENDED(0) && ENDED(1) && ENDED(2))
#define ALLWC (NOTWC(0) && NOTWC(1) && NOTWC(2))
#define NOPREPARED (srv[0] != S_PREPARED && srv[1] != S_PREPARED && srv[2] != S_PREPARED)
#define QUIET (req[0] == 0 && req[1] == 0 && req[2] == 0 && rreq[0] == 0 && rreq[1] == 0 && rreq[2] == 0)
#define NOCLOSING (sess[0] != CLOSING && sess[1] != CLOSING && sess[2] != CLOSING)
#define NOGHOST (!ghost[0] && !ghost[1] && !ghost[2])
#define ALLROLLEDBACK ((srv[0] != S_PREPARED || kind[0] != K_WRITER) && (srv[1] != S_PREPARED || kind[1] != K_WRITER) && (srv[2] != S_PREPARED || kind[2] != K_WRITER) && (WR(0) || WR(1) || WR(2)))
#endif

/* Atomicity: never one branch committed and another rolled back. */
#define ATOMICITY (!(ANYC && ANYR))
/* Validity: a branch commits only if every branch voted yes. */
#define VALIDITY (!ANYC || ALLVOTED)
/* Truthful answers, the safety half (the end state checks the rest):
 * committed => none rolled back; aborted => none committed. */
#define TRUTHFUL ((told != T_COMMITTED || !ANYR) && (told != T_ABORTED || !ANYC))
/* A durable commit decision is final: nothing is rolled back after it (the
 * caller may be told "committed" then, Config.AsyncCommit). */
#define DECISION (!((commitRec == L_DURABLE || drow == D_COMMIT) && ANYR))
/* Exclusion: never a commit decision and an abort record for one id. */
#define EXCLUSION (!(abortRec != L_NONE && (commitRec != L_NONE || drow == D_COMMIT)))

active proctype Monitor()
{
end:	atomic {
		!(ATOMICITY && VALIDITY && TRUTHFUL && DECISION && EXCLUSION) ->
		assert(ATOMICITY);
		assert(VALIDITY);
		assert(TRUTHFUL);
		assert(DECISION);
		assert(EXCLUSION)
	}
}

/* ---- printing, for counterexamples (pan does not print) ---- */

inline prReq(q) {
	if
	:: q == R_PREPARE -> printf("prepare")
	:: q == R_COMMIT -> printf("commit")
	:: q == R_ROLLBACK -> printf("rollback")
	:: q == R_ONEPHASE -> printf("commit-one-phase")
	:: q == R_LAST -> printf("commit-last")
	:: else -> printf("?")
	fi
}

inline prRep(v) {
	if
	:: v == P_OK -> printf("ok")
	:: v == P_YES -> printf("prepared")
	:: v == P_RO -> printf("readonly")
	:: v == P_NO -> printf("abort")
	:: v == P_XID -> printf("unknownxid")
	:: v == P_RETRY -> printf("retryable")
	:: v == P_LOST -> printf("unknown")
	:: else -> printf("?")
	fi
}

inline prTold(t) {
	if
	:: t == T_COMMITTED -> printf("committed")
	:: t == T_ABORTED -> printf("aborted")
	:: t == T_UNKNOWN -> printf("outcome-unknown")
	:: else -> printf("?")
	fi
}

/* ---- the coordinator: the machine ---- */

inline sendOwn(i, q) {
	printf("C  -> "); prReq(q); printf(" b%d", i);
	if
	:: att[i] > 0 -> printf(" attempt=%d", att[i])
	:: else
	fi;
	if
	:: sess[i] == OPEN -> req[i] = q; printf("\n")
	:: else -> rep[i] = P_LOST; printf(" (its session is gone: unknown)\n")
	fi
}

inline send(i, q, v) {
	if
	:: v -> rreq[i] = q; printf("C  -> "); prReq(q); printf(" b%d attempt=%d via=rm\n", i, att[i])
	:: else -> sendOwn(i, q)
	fi
}

inline release(i) {
	printf("C  -> release b%d\n", i);
	if
	:: sess[i] == OPEN -> sess[i] = CLOSING
	:: else
	fi
}

/* the coordinator's state is gone (done or crashed): its sessions close */
inline resetCoord() {
	for (k : 0 .. NP-1) {
		rep[k] = P_NONE;
		if
		:: req[k] != 0 -> reqLost[k] = 1
		:: else
		fi;
		if
		:: sess[k] == OPEN -> sess[k] = CLOSING
		:: else
		fi;
		bs[k] = 0; att[k] = 0; via[k] = 0; lostc[k] = 0; acked[k] = 0; fate[k] = 0
	};
	sole = 0; logged = 0; inRes = 0; abortFlag = 0; last = NOLAST; res1 = 0; logState = 0
}

inline finish(t) {
	if
	:: phase != PH_DONE ->
		phase = PH_DONE; told = t;
		printf("C  finish "); prTold(t); printf("\n");
		resetCoord()
	:: else
	fi
}

inline forgetCommit() {
	/* Safe forgetting: no branch still needs the record. */
	assert(NOPREPARED);
	commitRec = L_NONE
}

inline rollbackIfNeeded(i) {
	if
	:: bs[i] == B_PREPARED || bs[i] == B_MAYBE ->
		bs[i] = B_ROLLINGBACK; att[i] = 1; send(i, R_ROLLBACK, via[i])
	:: else
	fi
}

inline maybeFinishAbort() {
	fin = 1;
	for (k : 0 .. NP-1) {
		if
		:: bs[k] == B_ACTIVE || bs[k] == B_PREPARING || bs[k] == B_PREPARED ||
		   bs[k] == B_MAYBE || bs[k] == B_ROLLINGBACK -> fin = 0
		:: else
		fi
	};
	if
	:: fin -> finish(T_ABORTED)
	:: else
	fi;
	fin = 0
}

inline startAbort() {
	abortFlag = 1;
	phase = PH_ABORTING;
	for (k : 0 .. NP-1) {
		if
		:: bs[k] == B_ACTIVE ->
			bs[k] = B_ROLLINGBACK; att[k] = 1; sendOwn(k, R_ROLLBACK)
		:: else -> rollbackIfNeeded(k)
		fi
	};
	maybeFinishAbort()
}

inline commitAll() {
	for (k : 0 .. NP-1) {
		if
		:: bs[k] == B_PREPARED -> bs[k] = B_COMMITTING; att[k] = 1; sendOwn(k, R_COMMIT)
		:: else
		fi
	};
	k = 0
}

inline undecided() {
	for (k : 0 .. NP-1) {
		if
		:: bs[k] == B_PREPARED -> bs[k] = B_PENDING; release(k)
		:: else
		fi
	};
	finish(T_UNKNOWN)
}

inline maybeFinishCommit() {
	fin = 1; pend = 0; anyAck = 0; unk = 0; abt = 0;
	for (k : 0 .. NP-1) {
		if
		:: bs[k] == B_COMMITTING || bs[k] == B_CHECKING -> fin = 0
		:: bs[k] == B_PENDING -> pend = 1
		:: else
		fi;
		if
		:: fate[k] == F_UNKNOWN -> unk = 1
		:: fate[k] == F_ABORTED -> abt = 1
		:: else
		fi;
		if
		:: acked[k] -> anyAck = 1
		:: else
		fi
	};
	if
	:: !fin -> skip
	:: fin && abt -> finish(T_ABORTED)
	:: fin && !abt && unk -> finish(T_UNKNOWN)
	:: fin && !abt && !unk && sole && pend -> finish(T_UNKNOWN)
	:: else ->
		if
#ifdef MUT_FORGET_ACKED_RM
		/* MUTATION: the record is forgotten although a branch was
		 * acknowledged from another session only (fact 7). */
		:: logged && !inRes && !pend -> printf("C  -> forget\n"); forgetCommit()
#else
		:: logged && !inRes && !pend && !anyAck -> printf("C  -> forget\n"); forgetCommit()
#endif
		:: else
		fi;
		finish(T_COMMITTED)
	fi;
	fin = 0; pend = 0; anyAck = 0; unk = 0; abt = 0
}

inline maybeFinishOnePhase() {
	fin = 1;
	for (k : 0 .. NP-1) {
		if
		:: bs[k] == B_PREPARING || bs[k] == B_COMMITTING || bs[k] == B_ROLLINGBACK -> fin = 0
		:: else
		fi
	};
	if
	:: fin && res1 != T_NONE -> finish(res1)
	:: else
	fi;
	fin = 0
}

/* onCommit: the application commits (evCommit). */
inline onCommit() {
	printf("C  commit\n");
	n1 = 0; w = NOLAST;
	for (k : 0 .. NP-1) {
		if
		:: kind[k] != K_IDLE -> n1++; w = k
		:: else
		fi
	};
	if
	:: n1 == 1 ->
		/* one working branch: one-phase commit; the idle ones are asked
		 * to prepare so that they release their sessions */
		phase = PH_ONEPHASE;
		bs[w] = B_COMMITTING;
		for (k : 0 .. NP-1) {
			if
			:: kind[k] == K_IDLE -> bs[k] = B_PREPARING; sendOwn(k, R_PREPARE)
			:: else
			fi
		};
		sendOwn(w, R_ONEPHASE)
	:: else ->
		if
		:: n1 > 1 && lrCap && kind[LR] != K_IDLE -> last = LR
		:: else
		fi;
		phase = PH_PREPARING;
		for (k : 0 .. NP-1) {
			if
			:: k != last ->
				bs[k] = B_PREPARING; needVote[k] = (kind[k] != K_IDLE);
				sendOwn(k, R_PREPARE)
			:: else
			fi
		}
	fi;
	n1 = 0; w = 0
}

/* onVote: branch i answered prepare (evVote). */
inline onVote(i, v) {
	if
	:: v == P_YES -> bs[i] = B_PREPARED
	:: v == P_RO -> bs[i] = B_DONE
	:: v == P_LOST -> bs[i] = B_MAYBE; via[i] = 1; abortFlag = 1
	:: else -> bs[i] = B_DONE; abortFlag = 1
	fi;
	if
	:: phase == PH_ONEPHASE -> rollbackIfNeeded(i); maybeFinishOnePhase()
	:: phase == PH_ABORTING -> rollbackIfNeeded(i); maybeFinishAbort()
	:: phase == PH_PREPARING && abortFlag -> startAbort()
	:: phase == PH_PREPARING && !abortFlag ->
		n1 = 0; n2 = 0;
		for (k : 0 .. NP-1) {
			if
			:: bs[k] == B_PREPARING -> n1++
			:: bs[k] == B_PREPARED -> n2++
			:: else
			fi
		};
		if
		:: n1 > 0 -> skip	/* still waiting */
		:: n1 == 0 && last != NOLAST ->
			bs[last] = B_COMMITTING;
			if
			:: n2 == 0 -> phase = PH_ONEPHASE; sendOwn(last, R_ONEPHASE)
			:: else -> phase = PH_DECIDING; sendOwn(last, R_LAST)
			fi
		:: n1 == 0 && last == NOLAST && n2 == 0 -> finish(T_COMMITTED)
		:: n1 == 0 && last == NOLAST && n2 == 1 ->
			/* the sole prepared branch commits without a record */
			phase = PH_COMMITTING; sole = 1; commitAll()
		:: n1 == 0 && last == NOLAST && n2 > 1 ->
			phase = PH_LOGGING; logState = LS_REQ; printf("C  -> log-commit\n")
		fi;
		n1 = 0; n2 = 0
	:: else
	fi
}

/* onDecided: the last resource's commit with the decision returned. */
inline onDecided(v) {
	bs[last] = B_DONE;
	if
	:: v == P_OK -> logged = 1; inRes = 1; phase = PH_COMMITTING; commitAll()
	:: v == P_LOST -> undecided()
	:: else -> startAbort()
	fi
}

/* onCommitted: a commit of branch i returned. */
inline onCommitted(i, v) {
	if
#ifdef MUT_SOLE_ACK_TRUSTED
	/* MUTATION: the machine before b63acf2: a sole commit acknowledged
	 * from another session is committed. */
	:: v == P_OK -> bs[i] = B_DONE; acked[i] = via[i]; maybeFinishCommit()
#else
	/* The only prepared branch, committed from another session with no
	 * record behind it: on MariaDB that "ok" may be fact 7; nothing
	 * proves it committed. */
	:: v == P_OK && sole && via[i] -> bs[i] = B_DONE; acked[i] = 1; fate[i] = F_UNKNOWN; maybeFinishCommit()
	:: v == P_OK && !(sole && via[i]) -> bs[i] = B_DONE; acked[i] = via[i]; maybeFinishCommit()
#endif
#ifdef MUT_UNKNOWN_COMMITTED
	/* MUTATION: the machine before the fence: "unknown XID" from a
	 * commit through another session is read as committed, with no
	 * lookup of an abort record. */
	:: v == P_XID && via[i] -> bs[i] = B_DONE; acked[i] = 1; maybeFinishCommit()
	:: v == P_XID && !via[i] && att[i] >= TRIES ->
		bs[i] = B_PENDING; release(i); maybeFinishCommit()
	:: v == P_XID && !via[i] && att[i] < TRIES ->
		via[i] = 1; att[i]++; send(i, R_COMMIT, via[i])
#else
	:: v == P_XID ->
		/* gone: ask the log whether an abort is recorded (the lookup is
		 * the coordinator's next step) */
		bs[i] = B_CHECKING; acked[i] = 1; printf("C  -> lookup-abort for b%d\n", i)
#endif
	:: v != P_OK && v != P_XID && att[i] >= TRIES ->
		if
		:: v == P_LOST -> lostc[i] = 1
		:: else
		fi;
		bs[i] = B_PENDING;
		if
		:: !via[i] -> release(i)
		:: else
		fi;
		maybeFinishCommit()
	:: v != P_OK && v != P_XID && att[i] < TRIES ->
		if
		:: v == P_LOST -> lostc[i] = 1; via[i] = 1	/* not retryable: go elsewhere */
		:: else
		fi;
		att[i]++; send(i, R_COMMIT, via[i])
	fi
}

/* onLookedUp: the log answered whether an abort is recorded (evLookedUp). */
inline onLookedUp(i, aborted) {
	printf("C  lookup b%d ", i);
	if
	:: aborted -> printf("aborted\n")
	:: else -> printf("none\n")
	fi;
	bs[i] = B_DONE;
	if
	:: aborted && sole && !lostc[i] -> fate[i] = F_ABORTED; SEEN(G_SOLE_ABORTED)
	:: aborted && !(sole && !lostc[i]) -> fate[i] = F_UNKNOWN
#ifdef MUT_SOLE_NOLOST
	/* MUTATION: a sole commit reads "unknown XID" as committed without
	 * an earlier attempt whose reply was lost. */
	:: !aborted -> fate[i] = F_COMMITTED
#elif defined(MUT_SOLE_LOST_TRUSTED)
	/* MUTATION: the machine before the model's finding (docs/model.md):
	 * a sole commit reads "unknown XID" as committed after an earlier
	 * attempt whose reply was lost. A retry from another session may have
	 * been MariaDB's fact 7 (answered, not committed, unlisted). */
	:: !aborted && sole && !lostc[i] -> fate[i] = F_UNKNOWN
	:: !aborted && !(sole && !lostc[i]) -> fate[i] = F_COMMITTED;
		if
		:: lostc[i] -> SEEN(G_LOST_COMMITTED)
		:: else
		fi
#else
	/* For a sole commit "unknown XID" proves nothing (no record backs it;
	 * from another session it may be MariaDB's fact 7): outcome unknown
	 * (xa/machine.go onLookedUp). */
	:: !aborted && sole -> fate[i] = F_UNKNOWN
	:: !aborted && !sole -> fate[i] = F_COMMITTED;
		if
		:: lostc[i] -> SEEN(G_LOST_COMMITTED)
		:: else
		fi
#endif
	fi;
	maybeFinishCommit()
}

/* rolledBack: a rollback of branch i returned. */
inline rolledBack(i, v) {
	if
	:: v == P_OK || v == P_XID -> bs[i] = B_DONE
	:: v != P_OK && v != P_XID && att[i] >= TRIES ->
		bs[i] = B_PENDING;	/* presumed abort: recovery rolls it back */
		if
		:: !via[i] -> release(i)
		:: else
		fi
	:: v != P_OK && v != P_XID && att[i] < TRIES ->
		if
		:: v == P_LOST -> via[i] = 1
		:: else
		fi;
		att[i]++; send(i, R_ROLLBACK, via[i])
	fi
}

inline onPhase2(i, v) {
	if
	:: phase == PH_ONEPHASE && bs[i] == B_ROLLINGBACK ->
		rolledBack(i, v);
		if
		:: bs[i] != B_ROLLINGBACK -> maybeFinishOnePhase()
		:: else
		fi
	:: phase == PH_ONEPHASE && bs[i] == B_COMMITTING ->
		bs[i] = B_DONE;
		if
		:: v == P_OK -> res1 = T_COMMITTED
		:: v == P_LOST -> res1 = T_UNKNOWN
		:: else -> res1 = T_ABORTED
		fi;
		maybeFinishOnePhase()
	:: phase == PH_DECIDING && i == last && bs[i] == B_COMMITTING -> onDecided(v)
	:: phase == PH_COMMITTING && bs[i] == B_COMMITTING -> onCommitted(i, v)
	:: phase == PH_ABORTING && bs[i] == B_ROLLINGBACK ->
		rolledBack(i, v);
		if
		:: bs[i] != B_ROLLINGBACK -> maybeFinishAbort()
		:: else
		fi
	:: else
	fi
}

inline dispatch(i) {
	r = rep[i]; rep[i] = P_NONE;
	if
	:: bs[i] == B_PREPARING -> printf("C  vote b%d ", i); prRep(r); printf("\n"); onVote(i, r)
	:: else -> printf("C  phase2 b%d ", i); prRep(r); printf("\n"); onPhase2(i, r)
	fi;
	r = 0
}

/* the log's check-and-enqueue, one critical section */
#ifdef MUT_LOG_DURABLE_ONLY
/* MUTATION: the log checks the records on disk, not those still queued. */
#define ABORT_SEEN (abortRec == L_DURABLE)
#define COMMIT_SEEN (commitRec == L_DURABLE)
#else
#define ABORT_SEEN (abortRec != L_NONE)
#define COMMIT_SEEN (commitRec != L_NONE)
#endif

inline crashCoord() {
	printf("C  crashes\n");
	ccrash--;
	phase = PH_CRASHED;
	resetCoord();
	/* the log's queue dies with the process */
	if
	:: commitRec == L_QUEUED -> commitRec = L_NONE; printf("L  queued commit record lost\n")
	:: else
	fi;
	if
	:: abortRec == L_QUEUED -> abortRec = L_NONE; printf("L  queued abort record lost\n")
	:: else
	fi
}

#define ALIVE (phase != PH_DONE && phase != PH_CRASHED)

#define REPLY(i) \
	:: atomic { rep[i] != P_NONE && ALIVE -> dispatch(i) } \
	:: d_step { bs[i] == B_CHECKING && phase == PH_COMMITTING -> \
		onLookedUp(i, (abortRec == L_DURABLE)) } \
	:: d_step { sole && phase == PH_COMMITTING && att[i] == 1 && \
		req[i] == R_COMMIT && !reqLost[i] -> \
		/* errTooLate: the sole commit is not sent after the timeout */ \
		req[i] = 0; printf("C  phase2 b%d too-late\n", i); \
		bs[i] = B_PREPARED; startAbort() }

proctype Coord()
{
	/* Begin and enlist: every branch starts on a session of its own;
	 * what each does, and whether b1 has a decision table, is chosen
	 * here. */
	atomic {
		for (k : 0 .. NP-1) {
			srv[k] = S_ACTIVE; sess[k] = OPEN; bs[k] = B_ACTIVE
		};
#ifdef K0
		kind[0] = K0;
#else
		if :: kind[0] = K_IDLE :: kind[0] = K_READER :: kind[0] = K_WRITER fi;
#endif
#ifdef K1
		kind[1] = K1;
#else
		if :: kind[1] = K_IDLE :: kind[1] = K_READER :: kind[1] = K_WRITER fi;
#endif
#if NP > 2
#ifdef K2
		kind[2] = K2;
#else
		if :: kind[2] = K_IDLE :: kind[2] = K_READER :: kind[2] = K_WRITER fi;
#endif
#endif
#ifdef LRCAP
		lrCap = LRCAP;
#else
		if :: lrCap = 0 :: lrCap = 1 fi;
#endif
		phase = PH_ACTIVE;
		printf("C  begin: b0 %d, b1 %d", kind[0], kind[1]);
#if NP > 2
		printf(", b2 %d", kind[2]);
#endif
		printf(" (0 idle, 1 reads, 2 writes); b1 decision table %d\n", lrCap)
	};
	do
	:: atomic { ccrash > 0 && ALIVE && !stop -> crashCoord() }; break
	:: d_step { phase == PH_ACTIVE -> onCommit() }
	:: d_step { phase == PH_ACTIVE -> printf("C  rollback (or timeout)\n"); startAbort() }
	:: d_step { phase == PH_PREPARING -> printf("C  timeout\n"); startAbort() }
#ifdef MUT_EARLY_DECISION
	/* MUTATION: the decision is written before the last vote. */
	:: d_step { phase == PH_PREPARING && !abortFlag && last == NOLAST &&
		((bs[0] == B_PREPARED && bs[1] == B_PREPARING) ||
		 (bs[1] == B_PREPARED && bs[0] == B_PREPARING)) ->
		phase = PH_LOGGING; logState = LS_REQ; printf("C  -> log-commit (before the last vote)\n") }
#endif
	REPLY(0)
	REPLY(1)
#if NP > 2
	REPLY(2)
#endif
	/* actLog: LogCommit checks and enqueues in one critical section */
	:: d_step { phase == PH_LOGGING && logState == LS_REQ ->
		if
		:: ABORT_SEEN ->
			printf("C  logged abort-recorded\n");
			if
			:: ALLROLLEDBACK -> SEEN(G_REFUSED_AFTER_ROLLBACK)
			:: else
			fi;
			logState = 0; startAbort()
		:: else -> commitRec = L_QUEUED; logState = LS_WAIT; printf("L  commit record queued\n")
		fi }
	:: d_step { phase == PH_LOGGING && logState == LS_REQ ->
		printf("C  logged too-late\n"); logState = 0; startAbort() }
	:: d_step { phase == PH_LOGGING && logState == LS_WAIT && commitRec == L_DURABLE ->
		printf("C  logged\n"); logState = 0; logged = 1; phase = PH_COMMITTING; commitAll() }
	:: d_step { phase == PH_LOGGING && logState == LS_WAIT ->
		/* the write failed or ran out of time: may or may not be durable */
		printf("C  logged unknown\n"); logState = 0; undecided() }
	:: phase == PH_DONE -> break
	od
}

/* ---- a participant's server ---- */

inline execOwn(i) {
	printf("S%d ", i); prReq(req[i]); printf(" b%d", i);
	if
	:: req[i] == R_PREPARE ->
		if
		:: srv[i] == S_ACTIVE && kind[i] != K_WRITER -> srv[i] = S_READONLY; voted[i] = P_RO
		:: srv[i] == S_ACTIVE && kind[i] == K_WRITER ->
			srv[i] = S_PREPARED; attached[i] = MARIA(i); voted[i] = P_YES
		:: srv[i] == S_ACTIVE && kind[i] == K_WRITER ->
			srv[i] = S_ROLLEDBACK; voted[i] = P_NO	/* refuses: a deadlock */
		:: srv[i] != S_ACTIVE -> voted[i] = P_NO
		fi;
		x = voted[i]
	:: req[i] == R_COMMIT ->
		if
		:: srv[i] == S_PREPARED -> srv[i] = S_COMMITTED; attached[i] = 0; x = P_OK
		:: else -> x = P_XID
		fi
	:: req[i] == R_ROLLBACK ->
		if
		:: srv[i] == S_PREPARED || srv[i] == S_ACTIVE -> srv[i] = S_ROLLEDBACK; attached[i] = 0
		:: else
		fi;
		x = P_OK
	:: req[i] == R_ONEPHASE ->
		if
		:: srv[i] == S_ACTIVE -> srv[i] = S_COMMITTED; x = P_OK
		:: srv[i] == S_ACTIVE -> srv[i] = S_ROLLEDBACK; x = P_NO	/* refused */
		:: srv[i] != S_ACTIVE -> x = P_NO
		fi
	:: req[i] == R_LAST ->
		/* the work and the decision row commit together; an ABORT
		 * marker under the same key makes the insert fail */
		if
		:: srv[i] == S_ACTIVE && drow != D_ABORT -> srv[i] = S_COMMITTED; drow = D_COMMIT; x = P_OK
		:: srv[i] == S_ACTIVE && drow == D_ABORT ->
			srv[i] = S_ROLLEDBACK; x = P_NO; SEEN(G_LAST_FENCED);
			printf(" (duplicate key: the ABORT marker)")
		:: srv[i] == S_ACTIVE && drow != D_ABORT -> srv[i] = S_ROLLEDBACK; x = P_NO
		:: srv[i] != S_ACTIVE -> x = P_NO
		fi
	fi;
	printf(" -> "); prRep(x);
	if
	:: !reqLost[i] -> rep[i] = x; printf("\n")
	:: else -> printf(" (nobody listens)\n")
	fi;
	req[i] = 0; reqLost[i] = 0; x = 0
}

inline execVia(i) {
	printf("S%d ", i); prReq(rreq[i]); printf(" b%d from another session", i);
	if
	:: rreq[i] == R_COMMIT ->
		if
#ifdef MUT_ATTACHED_XID
		/* MUTATION: the driver reads MariaDB's 1397 for a branch still
		 * attached to its session as "unknown XID" (fact 6). */
		:: srv[i] == S_PREPARED && attached[i] -> x = P_XID
#else
		:: srv[i] == S_PREPARED && attached[i] -> x = P_RETRY; SEEN(G_RETRY)
#endif
		:: srv[i] == S_PREPARED && attached[i] && sess[i] == CLOSING && ghosts > 0 && !stop ->
			ghosts--; ghost[i] = 1; x = P_OK; printf(" (fact 7: not committed, no longer listed)")
		:: srv[i] == S_PREPARED && !attached[i] && !ghost[i] -> srv[i] = S_COMMITTED; x = P_OK
		:: srv[i] != S_PREPARED || ghost[i] -> x = P_XID
		fi
	:: rreq[i] == R_ROLLBACK ->
		if
		:: srv[i] == S_PREPARED && attached[i] -> x = P_RETRY
		:: srv[i] == S_PREPARED && !attached[i] && !ghost[i] -> srv[i] = S_ROLLEDBACK; x = P_OK
		:: srv[i] != S_PREPARED || ghost[i] -> x = P_OK
		fi
	fi;
	printf(" -> "); prRep(x); printf("\n");
	rreq[i] = 0
}

proctype Server(byte i)
{
	byte x;
end:	do
	/* run the request on the coordinator's session */
	:: atomic { req[i] != 0 -> execOwn(i) }
	/* the client is gone: the server drops the request unexecuted */
	:: atomic { req[i] != 0 && sess[i] == CLOSING ->
		printf("S%d drops the request on b%d's closed session\n", i, i);
		req[i] = 0; reqLost[i] = 0 }
	/* run a request from another session */
	:: atomic { rreq[i] != 0 -> execVia(i);
		if
		:: ALIVE -> rep[i] = x
		:: else
		fi;
		x = 0 }
	:: atomic { rreq[i] != 0 && !ALIVE -> rreq[i] = 0 }
	/* the server notices the disconnect: an unprepared branch rolls
	 * back, a prepared one detaches */
	:: atomic { sess[i] == CLOSING && req[i] == 0 ->
		printf("S%d notices b%d's session closed", i, i);
		sess[i] = CLOSED; attached[i] = 0;
		if
		:: srv[i] == S_ACTIVE -> srv[i] = S_ROLLEDBACK; printf(": rolled back\n")
		:: else -> printf("\n")
		fi }
	/* a lost reply on the coordinator's session: the coordinator sees
	 * "outcome unknown" and drops the connection; the request may still
	 * run */
	:: atomic { !stop && losses > 0 && req[i] != 0 && !reqLost[i] ->
		printf("S%d the reply to ", i); prReq(req[i]); printf(" b%d is lost\n", i);
		losses--; rep[i] = P_LOST; reqLost[i] = 1; sess[i] = CLOSING }
	/* a lost reply from another session: it ran, or not */
	:: atomic { !stop && losses > 0 && rreq[i] != 0 ->
		losses--;
		if
		:: true -> execVia(i)
		:: true -> rreq[i] = 0
		fi;
		printf("S%d the reply from another session is lost\n", i);
		x = 0;
		if
		:: ALIVE -> rep[i] = P_LOST
		:: else
		fi }
	/* a crash and restart: prepared branches survive, unprepared ones
	 * roll back, every session and request is lost */
	:: atomic { !stop && pcrash > 0 ->
		printf("S%d crashes and restarts\n", i);
		pcrash--;
		if
		:: srv[i] == S_ACTIVE -> srv[i] = S_ROLLEDBACK
		:: else
		fi;
		attached[i] = 0; ghost[i] = 0;
		if
		:: req[i] != 0 && !reqLost[i] && ALIVE -> rep[i] = P_LOST
		:: else
		fi;
		if
		:: rreq[i] != 0 && ALIVE -> rep[i] = P_LOST
		:: else
		fi;
		req[i] = 0; reqLost[i] = 0; rreq[i] = 0; sess[i] = CLOSED }
	/* the operator restarts a server that holds prepared transactions
	 * it does not list (the scanner reports it): a crash, not counted */
	:: atomic { ghost[i] ->
		printf("S%d restarted by the operator: b%d listed again\n", i, i);
		ghost[i] = 0;
		if
		:: srv[i] == S_ACTIVE -> srv[i] = S_ROLLEDBACK
		:: else
		fi;
		attached[i] = 0;
		if
		:: req[i] != 0 && !reqLost[i] && ALIVE -> rep[i] = P_LOST
		:: else
		fi;
		if
		:: rreq[i] != 0 && ALIVE -> rep[i] = P_LOST
		:: else
		fi;
		req[i] = 0; reqLost[i] = 0; rreq[i] = 0; sess[i] = CLOSED }
	od
}

/* ---- the decision log's disk ---- */
proctype Log()
{
end:	do
	:: atomic { commitRec == L_QUEUED -> commitRec = L_DURABLE; printf("L  commit record durable\n") }
	:: atomic { abortRec == L_QUEUED -> abortRec = L_DURABLE; printf("L  abort record durable\n") }
	od
}

/* ---- the recovery scanner ---- */

/* An ABORT record (and marker) is kept for AbortRetention; the model
 * assumes that this outlasts the coordinator of the transaction and any
 * request it sent (docs/model.md). */
#ifdef MUT_RETENTION_ANY
/* MUTATION (an assumption probe): the retention passes at any time. */
#define RETAINED (1)
#else
#define RETAINED (!ALIVE && QUIET)
#endif

#ifdef MUT_READ_QUEUED
/* MUTATION: the scanner reads commit records that are not yet durable. */
#define RECORDED (commitRec != L_NONE)
#else
#define RECORDED (commitRec == L_DURABLE)
#endif

/* a commit or rollback from the scanner's own session */
inline scanCommit(i) {
	printf("R  commit b%d", i);
	if
	:: srv[i] == S_PREPARED && !attached[i] && !ghost[i] -> srv[i] = S_COMMITTED; printf(" -> ok\n");
		if
		:: !ALIVE -> SEEN(G_RECOVERY_COMMITTED)
		:: else
		fi
	:: srv[i] == S_PREPARED && attached[i] -> printf(" -> retryable (attached)\n")
	:: srv[i] == S_PREPARED && attached[i] && sess[i] == CLOSING && ghosts > 0 && !stop ->
		ghosts--; ghost[i] = 1; printf(" -> ok (fact 7: not committed, no longer listed)\n")
	:: else -> printf(" -> unknownxid (done)\n")
	fi
}

inline scanRollback(i) {
	printf("R  rollback b%d", i);
	if
	:: srv[i] == S_PREPARED && !attached[i] && !ghost[i] -> srv[i] = S_ROLLEDBACK; printf(" -> ok\n")
	:: srv[i] == S_PREPARED && attached[i] -> printf(" -> retryable (attached)\n")
	:: else -> printf(" -> unknownxid (done)\n")
	fi
}

#define V_COMMIT   1
#define V_ROLLBACK 2
#define V_ABORTED  3

inline presumeAbort(i) {
#ifdef MUT_NO_FENCE
	/* MUTATION: the scanner before the fence: it looks the decision up
	 * once more just before it rolls back, and writes nothing. */
	atomic { found = (commitRec == L_DURABLE || drow == D_COMMIT); printf("R  lookup: decided=%d\n", found) };
	if
	:: found -> found = 0
	:: else -> atomic { scanRollback(i) }
	fi
#else
#ifndef MUT_NO_MARKER
	/* 1. the ABORT marker in the decision table: an in-flight
	 * last-resource commit makes it wait; if that commit won, the
	 * branch is committed instead */
	if
	:: lrCap ->
		atomic {
			if
			:: drow == D_COMMIT -> found = 1; SEEN(G_MARKER_LOST);
				printf("R  abort marker in b1's table: duplicate key (the commit won)\n")
			:: else -> drow = D_ABORT; printf("R  abort marker in b1's table\n")
			fi
		}
	:: else
	fi;
#endif
	if
	:: found -> atomic { scanCommit(i); found = 0 }
	:: !found ->
		/* 2. LogAbort: refused if a commit record exists or is queued */
		if
		:: !stop -> printf("R  crashes\n"); goto scanned
		:: atomic {
			true ->	/* a guard of its own: an inner else would refer to this selection */
			if
			:: COMMIT_SEEN -> found = 1; SEEN(G_ABORT_REFUSED);
				printf("R  log-abort error=commit-recorded\n")
			:: else ->
				if
				:: abortRec == L_NONE -> abortRec = L_QUEUED; printf("R  log-abort (queued)\n")
				:: else -> printf("R  log-abort (exists)\n")
				fi
			fi }
		fi;
		if
		:: found ->
			/* ErrCommitRecorded: Lookup; a durable record is committed
			 * now, one being written by the next scan */
			found = 0;
			atomic {
				if
				:: commitRec == L_DURABLE -> scanCommit(i)
				:: else -> printf("R  lookup: being written; the next scan commits\n")
				fi
			}
		:: !found ->
			/* 3. durable, and only then 4. roll back */
			if
			:: abortRec == L_DURABLE -> atomic { scanRollback(i) }
			:: abortRec == L_NONE -> printf("R  log-abort error (lost before durable)\n")
			:: !stop -> printf("R  crashes\n"); goto scanned
			fi
		fi
	fi
#endif
}

inline scanBranch(i) {
	/* list participant i; the verdict */
	atomic {
		L[i] = (srv[i] == S_PREPARED && !ghost[i]);
		gh = gh || ghost[i];	/* UnlistedPrepared */
		if
		:: !L[i] -> act = 0
		:: L[i] && (rc || rrow) -> act = V_COMMIT; printf("R  list b%d: prepared, decided commit\n", i)
		:: L[i] && !rc && !rrow && ra -> act = V_ABORTED; printf("R  list b%d: prepared, abort recorded\n", i)
		:: L[i] && !rc && !rrow && !ra && !calm -> act = 0; printf("R  list b%d: prepared, no decision, too young\n", i)
#ifdef MUT_NO_PRESUME
		/* MUTATION: recovery never presumes abort (a liveness bug: only
		 * the end state after the faults stop can catch it) */
		:: L[i] && !rc && !rrow && !ra && calm -> act = 0; printf("R  list b%d: prepared, no decision: left alone\n", i)
#else
		:: L[i] && !rc && !rrow && !ra -> act = V_ROLLBACK; printf("R  list b%d: prepared, no decision, old enough\n", i)
#endif
		fi
	};
	if
	:: act == V_COMMIT -> atomic { scanCommit(i); act = 0 }
	:: act == V_ABORTED -> atomic { scanRollback(i); act = 0 }	/* AbortLogged: fenced already */
	:: act == V_ROLLBACK -> act = 0; presumeAbort(i)
	:: act == 0
	fi
}

#ifdef SCANS
#define MORESCANS (nscan < SCANS)
#else
#define MORESCANS (1)
#endif

proctype Scanner()
{
	bit rc, rrow, ra, L[NP], found, gh;
	byte act, nfinal, nscan;
	do
	:: calm || MORESCANS ->
		/* read the decisions: the log, the decision table */
		atomic {
			rc = RECORDED; rrow = (drow == D_COMMIT); ra = (abortRec == L_DURABLE);
			printf("R  scan: commit record %d, commit row %d, abort record %d\n", rc, rrow, ra)
		};
		scanBranch(0);
		scanBranch(1);
#if NP > 2
		scanBranch(2);
#endif
		/* forget what no branch needs: every branch is gone from
		 * listings taken after the record was read */
		atomic {
#if NP == 2
			found = (L[0] || L[1]);
#else
			found = (L[0] || L[1] || L[2]);
#endif
#ifndef MUT_IGNORE_GHOSTS
			/* a participant holds prepared transactions it does not
			 * list: keep every record (fact 7) */
			if
			:: gh && !found && (rc || rrow) -> printf("R  keep the records: unlisted prepared transactions\n"); SEEN(G_GHOST_KEPT)
			:: else
			fi;
			found = found || gh;
#endif
#ifdef MUT_FORGET_LISTED
			/* MUTATION: the record is forgotten although a branch was
			 * listed (committed in this scan, or so it seemed). */
			found = 0;
#endif
			if
			:: rc && !found && commitRec == L_DURABLE -> printf("R  forget commit record\n"); forgetCommit()
			:: else
			fi;
			if
			:: rrow && !found && drow == D_COMMIT -> printf("R  forget commit row\n"); assert(NOPREPARED); drow = D_NONE
			:: else
			fi;
			if
			:: ra && !found && RETAINED && abortRec == L_DURABLE ->
				printf("R  forget abort record\n"); abortRec = L_NONE; SEEN(G_FORGOT_ABORT)
			:: else
			fi;
			if
			:: RETAINED && drow == D_ABORT -> printf("R  prune abort marker\n"); drow = D_NONE
			:: else
			fi;
			found = 0
		};
scanned:
		atomic {
			rc = 0; rrow = 0; ra = 0; found = 0; act = 0; gh = 0;
			L[0] = 0; L[1] = 0;
#if NP > 2
			L[2] = 0;
#endif
			if
			:: calm -> nfinal++
			:: else ->
#ifdef SCANS
				nscan++
#else
				skip
#endif
			fi
		};
		if
		:: nfinal == 2 -> break
		:: else
		fi
#ifdef SCANS
	/* the termination run: after SCANS scans, faults stop; the protocol
	 * must then come to rest by itself (else: an invalid end state) */
	:: atomic { !stop && !MORESCANS -> stop = 1; printf("-- faults stop\n") }
#endif
	:: atomic {
		!calm && !ALIVE && QUIET && NOCLOSING && NOGHOST && commitRec != L_QUEUED && abortRec != L_QUEUED ->
		stop = 1; calm = 1; printf("-- faults stop; recovery runs to the end\n") }
	od;
	/* Termination: every branch has ended, as the caller was told;
	 * every record is pruned. */
	assert(ALLENDED);
	assert(told != T_COMMITTED || ALLWC);
	assert(told != T_ABORTED || !ANYC);
	assert(commitRec == L_NONE && abortRec == L_NONE && drow == D_NONE)
}

init
{
	atomic {
		run Coord();
		run Server(0);
		run Server(1);
#if NP > 2
		run Server(2);
#endif
		run Log();
		run Scanner()
	}
}
