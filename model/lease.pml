/*
 * lease.pml: leases, epochs and takeover of the shared decision log
 * (docs/protocol.md, "Leases, epochs, takeover"; recovery/sqllog and
 * recovery.Takeover) as a Promela model for spin. One node p owns one log
 * L in the log database D; one global transaction T of p with two
 * branches; live nodes that take L over when p's lease expires (takers);
 * an operator's rollback by hand. Node p's process and the takers may pause
 * after any step (a zombie) and resume, or crash; D's clock is the only
 * clock. docs/model.md says what is modelled and what is not, the
 * configurations and the counterexamples. Run it with model/check (or go
 * test ./model).
 *
 * The single-log protocol underneath (the coordinator's machine, the
 * participants' faults, the decision log's queue) is model/xa.pml's; this
 * model keeps of it what leases act on: T's decision (a C row in L, written
 * by WriteCommit, or the last resource's commit with its decision row in
 * b1's decision table) and the fence of a presumed abort (the ABORT marker
 * in b1's table, then the A row in L, then the rollback).
 *
 * Knobs (-D on the spin command line):
 *   PAUSES=n    pauses of node p's process (a SIGSTOP, a GC or VM pause, a
 *               network cut from D: it stops renewing and acting; its
 *               requests already sent still run)
 *   CRASHES=n   crashes of node p's process; a crashed node restarts (a
 *               new process, which takes its log back at a new epoch) unless
 *   GONE        node p's machine is gone: a crash is for good
 *   TAKERS=1|2  live nodes running recovery.Takeover
 *   TPAUSES=n   pauses of takers, TCRASHES=n crashes of takers (a crashed
 *               taker is replaced at once by a new process of its node)
 *   LOSSES=n    a decision's answer lost (WriteCommit timed out, or the
 *               last resource's reply): outcome unknown
 *   HAND=n      rollbacks by hand (xactl rollback, without the lease)
 *   LRK=0|1     fix T's shape: 0 decision in L (WriteCommit), 1 b1 commits
 *               last with the decision row; by default chosen at begin
 *   CALMSCANS=n scans each recovery gets once faults stop (see Judge)
 *   FIX_RESCAN  the proposed fix of the findings in docs/model.md: a live
 *               node takes a log released clean over again when a branch
 *               of it is listed prepared, or a decision table holds a
 *               COMMIT row of it
 *   REACH=G_..  a reachability probe: fails (as it should) once the events
 *               in the mask have happened; see the G_ constants
 *   MUT_...     a mutation, which must fail: see each #ifdef below
 * spin -t replays a counterexample; its events print one a line: "P" node
 * p (its coordinator, its lease, its own recovery), "Q0" "Q1" the takers,
 * "D" the log database, "X" the operator, "--" the phases of the run.
 *
 * Names, model -> Go:
 *   ep, lh, lexp, lclean -> xa_log_logs.epoch (epoch(L), the fence) and
 *   the lease row's holder, expiry passed by D's clock (leaseRow.expired),
 *   clean; every acquisition moves both epochs to max + 1, so the lease's
 *   epoch is ep (recovery/sqllog lease.go acquire, renew, Release)
 *   row -> T's row in xa_log_decisions, kind C or A; drow -> T's row in
 *   b1's decision table (the last resource's COMMIT, or an ABORT marker)
 *   pE plost -> Log.epoch and Log.lost of node p's process; tE tlost ->
 *   those of a taker's (TakeOver's Log)
 *   Coord -> xa.Tx.Commit and the machine; wcq -> a LogCommit batch on
 *   its way to D with the epoch it carries (batcher.write, pgBatch,
 *   writeMySQLOneTrip); W_FENCED xa.ErrFenced, W_ABORTREC
 *   xa.ErrAbortRecorded, W_TOOLATE xa.ErrDecisionTooLate, W_UNKNOWN
 *   xa.ErrOutcomeUnknown
 *   OwnScan -> recovery.Scanner of node p's process (Presumption
 *   PresumeAfterGrace, PresumeNever once lost); Taker -> recovery.Takeover
 *   (Expired, TakeOver, Recover: a Scanner with PresumeNow, Release clean)
 *   presume() -> Scanner.takeFence: DecisionStore.ClaimAbort (the marker),
 *   then RecoveryLog.LogAbort (sqllog writeTx with the holder's epoch)
 *   Hand -> xactl rollback: Scanner.Resolve with a log opened by Observe
 *   (LogAbort without an epoch)
 */

#ifndef PAUSES
#define PAUSES 1
#endif
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef TAKERS
#define TAKERS 1
#endif
#ifndef TPAUSES
#define TPAUSES 0
#endif
#ifndef TCRASHES
#define TCRASHES 0
#endif
#ifndef LOSSES
#define LOSSES 0
#endif
#ifndef HAND
#define HAND 0
#endif
#ifndef CALMSCANS
#define CALMSCANS 3
#endif

/* a process */
#define RUN    0
#define PAUSED 1
#define DEAD   2

/* lease holders: a process, told apart from another process of the same
 * node by the epoch it holds (every acquisition takes a new one) */
#define H_NONE 0
#define H_P    1      /* node p's process */
#define H_Q    2      /* taker t's process is H_Q + t */

/* why the holder stopped renewing */
#define W_PAUSED 1
#define W_CRASHED 2
#define W_CRASHED_MID 3   /* a taker crashed after acting on a branch */

/* T's row in L, and in b1's decision table */
#define R_NONE 0
#define RC     1
#define RA     2

/* a branch on its server */
#define S_NONE       0   /* T has not begun */
#define S_ACTIVE     1
#define S_PREPARED   2
#define S_COMMITTED  3
#define S_ROLLEDBACK 4

/* the answer to a decision */
#define W_OK       1
#define W_FENCED   2
#define W_ABORTREC 3
#define W_TOOLATE  4
#define W_UNKNOWN  5

/* what T's caller was told */
#define T_NONE      0
#define T_COMMITTED 1
#define T_ABORTED   2
#define T_UNKNOWN   3

/* the scanner's verdict on a listed branch */
#define V_ROLLBACK 3   /* presumed abort: the fence, then roll back */

/* ---- the log database D ---- */
byte ep = 1;         /* epoch(L): node p opened L at epoch 1 */
byte lh = H_P;       /* the lease's holder */
bit  lexp;           /* its expiry has passed, by D's clock */
bit  lclean;         /* released with nothing in doubt */
byte row;            /* T's decision row in L */
byte wcq;            /* a WriteCommit of T on its way to D: its epoch */
bit  wcl;            /* its caller still waits for the answer */
byte wcr;            /* the answer */

/* ---- the participants: b0, and b1 with a decision table that L
 * delegated decisions to (so every presumed abort inserts a marker) ---- */
byte srv[2];
byte drow;

/* ---- node p's process ---- */
byte prun = RUN;
byte pinc = 1;       /* its process: 1 runs T; 2 is a restart */
byte pE = 1;         /* the epoch it holds or held; 0: none yet */
bit  plost;          /* it knows its lease was taken over */

/* ---- the takers ---- */
byte trun[TAKERS];
byte tE[TAKERS];
bit  tlost[TAKERS];

/* ---- T ---- */
bit  lr;             /* b1 commits last with the decision row */
byte told;

/* ---- faults ---- */
byte pauses = PAUSES;
byte pcrash = CRASHES;
byte tpauses = TPAUSES;
byte tcrash = TCRASHES;
byte losses = LOSSES;
byte hands = HAND;
bit  calm;           /* faults have stopped */

/* ---- ghosts, for the properties and probes ---- */
bit  stale;          /* the holder has not renewed since it paused or crashed */
byte staleWhy;
bit  prep0, prep1;   /* b0, b1 voted prepared */
bit  tookover;       /* a taker has taken L over */
bit  zombie;         /* node p's first process paused holding L */
bit  tmid[TAKERS];   /* the taker has acted on a branch since it took L */
bit  decided;        /* T's coordinator has its decision's answer */

/* ---- reachability probes ---- */
#define G_ZOMBIE_FENCED   1   /* T's coordinator, paused holding L, got Fenced from D for its WriteCommit */
#define G_DOOMED          2   /* a taker's presumed abort rolled back a prepared branch */
#define G_NEW_EPOCH       4   /* node p took its log back at a new epoch after a takeover */
#define G_TAKER_REPLACED  8   /* a taker took L over from a taker that crashed mid-recovery (it had acted on a branch, and left one in doubt) */
#define G_LR_FENCED      16   /* the last resource's commit hit a marker of a takeover */
#define G_STALE_TAKER    32   /* a taker paused past its lease had its WriteAbort refused as Fenced */
#define G_LATE_PREPARE   64   /* T prepared a branch after L was released clean */
#define G_RESCAN        128   /* (FIX_RESCAN) a log released clean taken over again */
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
#define ANYC (srv[0] == S_COMMITTED || srv[1] == S_COMMITTED)
#define ANYR (srv[0] == S_ROLLEDBACK || srv[1] == S_ROLLEDBACK)
#define NOPREPARED (srv[0] != S_PREPARED && srv[1] != S_PREPARED)
/* Atomicity: never one branch committed and another rolled back (both
 * write). */
#define ATOMICITY (!(ANYC && ANYR))
/* Validity: a branch commits only if every branch voted yes (b1 as the
 * last resource votes by committing). */
#define VALIDITY (!ANYC || (prep0 && (lr || prep1)))
/* Truthful answers (the end state checks the rest). */
#define TRUTHFUL ((told != T_COMMITTED || !ANYR) && (told != T_ABORTED || !ANYC))
/* A commit decision is final. */
#define DECISION (!((row == RC || drow == RC) && ANYR))
/* Exclusion: never an A row with a commit decision (the C row in L
 * excludes it by D's primary key; the decision table's row by the
 * marker). */
#define EXCLUSION (!(row == RA && drow == RC))

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

/* T's coordinator is done with T (or gone); once faults stop, the scans
 * counted against CALMSCANS wait for it (it finishes by itself then) */
#define CDONE (told != T_NONE || pinc != 1 || prun == DEAD)

/* T's coordinator (node p's first process) holds L live: it holds the
 * current epoch and has renewed since it last paused. */
#define TLIVE (pinc == 1 && prun != DEAD && lh == H_P && ep == pE && !plost && !stale)

/* ---- the lease (recovery/sqllog lease.go) ---- */

inline prHolder(h) {
	if
	:: h == H_NONE -> printf("nobody")
	:: h == H_P -> printf("P")
	:: else -> printf("Q%d", h - H_Q)
	fi
}

/* Acquire: one transaction of D; its checks are the caller's guard. No
 * takeover of a live holder: the lease it takes, if held, is one whose
 * holder stopped renewing. */
inline acquire(h) {
	assert(lh == H_NONE || stale);
	printf(" (from "); prHolder(lh); printf(" at epoch %d", ep);
	if
	:: lh != H_NONE -> printf(", expired")
	:: lh == H_NONE && lclean -> printf(", released clean")
	:: else -> printf(", released")
	fi;
	ep++; lh = h; lexp = 0; lclean = 0; stale = 0; staleWhy = 0;
	printf(") -> epoch %d\n", ep)
}

/* the process holding epoch e stops renewing */
inline stops(h, e, why) {
	if
	:: lh == h && ep == e && e != 0 -> stale = 1; staleWhy = why
	:: else
	fi
}

/* ---- the servers: each request runs when it is sent (a request that
 * waits in the network is a process paused before sending it) ---- */

inline commitB(i) {
	if
	:: srv[i] == S_PREPARED -> srv[i] = S_COMMITTED; printf(" -> ok\n")
	:: else -> printf(" -> unknownxid (done)\n")
	fi
}

inline rollbackB(i) {
	if
	:: srv[i] == S_PREPARED -> srv[i] = S_ROLLEDBACK; printf(" -> ok\n")
	:: else -> printf(" -> unknownxid (done)\n")
	fi
}

/* ---- node p's coordinator: T ---- */

#define CR (prun == RUN)

/* what the machine does with the decision's answer */
inline answer() {
	decided = 1;
	printf("P  logged ");
	if
	:: res == W_OK -> printf("ok\n")
	:: res == W_FENCED -> printf("fenced\n");
		/* Log.noteLost: unless it holds a newer epoch already */
		if
		:: we == pE -> plost = 1
		:: else
		fi
	:: res == W_ABORTREC -> printf("abort-recorded\n")
	:: res == W_TOOLATE -> printf("too-late\n")
	:: res == W_UNKNOWN -> printf("unknown: its branches are left to recovery\n"); told = T_UNKNOWN
	fi
}

proctype Coord()
{
	byte res, we;
	{
	atomic { CR ->
		if
#ifdef LRK
		:: lr = LRK
#else
		:: lr = 0
		:: lr = 1
#endif
		fi;
		srv[0] = S_ACTIVE; srv[1] = S_ACTIVE;
		printf("P  begin T; b1 commits last %d\n", lr)
	};
	atomic { CR ->
		printf("P  prepare b0");
		if
		:: lh == H_NONE && lclean -> SEEN(G_LATE_PREPARE)
		:: else
		fi;
		srv[0] = S_PREPARED; prep0 = 1; printf(" -> prepared\n")
	};
	if
	:: lr ->
		/* the last resource: b1's work and its decision row commit in
		 * one phase; a marker under the key makes it fail */
		atomic { CR ->
			printf("P  commit-last b1");
			if
			:: drow == RA -> srv[1] = S_ROLLEDBACK; res = W_ABORTREC; SEEN(G_LR_FENCED);
				printf(" -> duplicate key: the ABORT marker\n")
			:: else -> srv[1] = S_COMMITTED; drow = RC; res = W_OK; printf(" -> ok\n")
			fi;
			if
			:: !calm && losses > 0 -> losses--; res = W_UNKNOWN; printf("P  the reply is lost\n")
			:: true
			fi;
			answer()
		}
	:: !lr ->
		atomic { CR ->
			printf("P  prepare b1");
			if
			:: lh == H_NONE && lclean -> SEEN(G_LATE_PREPARE)
			:: else
			fi;
			srv[1] = S_PREPARED; prep1 = 1; printf(" -> prepared\n")
		};
		/* LogCommit: a process that knows it lost L refuses it without
		 * asking D (Log.holding); otherwise the batch carries the epoch
		 * the process holds now */
		atomic { CR ->
			if
			:: plost -> res = W_FENCED; printf("P  log-commit: this process lost L\n"); answer()
			:: else -> wcq = pE; we = pE; wcl = 1; printf("P  log-commit at epoch %d\n", pE)
			fi
		};
		if
		:: res == 0 ->
			if
			:: atomic { CR && wcr != 0 -> res = wcr; wcr = 0; wcl = 0;
				if
				:: res == W_FENCED && zombie -> SEEN(G_ZOMBIE_FENCED)
				:: else
				fi;
				answer() }
			:: atomic { CR && !calm && losses > 0 && wcl ->
				/* the write's answer is late or lost */
				losses--; wcl = 0; wcr = 0; res = W_UNKNOWN; answer() }
			fi
		:: else
		fi
	fi;
	if
	:: res == W_OK && lr ->
		atomic { CR -> printf("P  commit b0"); commitB(0); told = T_COMMITTED; printf("P  T committed\n") }
	:: res == W_OK && !lr ->
		atomic { CR -> printf("P  commit b0"); commitB(0) };
		/* then forget the C row: every branch acknowledged */
		atomic { CR -> printf("P  commit b1"); commitB(1);
			printf("P  forget T's C row\n"); assert(NOPREPARED); row = R_NONE;
			told = T_COMMITTED; printf("P  T committed\n") }
	:: res == W_FENCED || res == W_ABORTREC || res == W_TOOLATE ->
		/* nothing was written: roll back */
		if
		:: lr -> atomic { CR -> printf("P  rollback b0"); rollbackB(0); told = T_ABORTED; printf("P  T aborted\n") }
		:: !lr ->
			atomic { CR -> printf("P  rollback b0"); rollbackB(0) };
			atomic { CR -> printf("P  rollback b1"); rollbackB(1); told = T_ABORTED; printf("P  T aborted\n") }
		fi
	:: res == W_UNKNOWN
	fi
	} unless { pinc != 1 || prun == DEAD }
}

/* ---- recovery: a scan (recovery.Scanner.scan) ----
 * The caller declares L0 L1 rc rrow ra act found doubt; RUNOK is its
 * process running, MYE the epoch it holds, LOST whether it knows it lost
 * L, NOW 1 for a taker (PresumeNow), 0 for node p (PresumeAfterGrace),
 * TAG 9 for node p, else the taker's number. */

inline tag(w) {
	if
	:: w == 9 -> printf("P  ")
	:: else -> printf("Q%d ", w)
	fi
}

/* a taker acts on a branch (for the probe G_TAKER_REPLACED) */
inline acted(NOW, TAG) {
	if
	:: NOW -> tmid[TAG] = 1
	:: else
	fi
}

/* the fence of a presumed abort, then the rollback (Scanner.takeFence) */
inline presume(i, RUNOK, MYE, LOST, NOW, TAG) {
#ifdef MUT_TAKEOVER_NO_FENCE
	/* MUTATION: a takeover rolls back at once, without the marker and
	 * the A row. */
	if
	:: NOW -> atomic { RUNOK -> act = 0; tag(TAG); printf("roll back b%d (no fence)", i); rollbackB(i); SEEN(G_DOOMED) }
	:: else ->
#endif
	/* 1. the ABORT marker in b1's decision table: if the last
	 * resource's commit won, the branch is committed instead */
	atomic { RUNOK ->
		act = 0; acted(NOW, TAG); tag(TAG);
		if
		:: drow == RC -> found = 1; printf("abort marker: duplicate key (the commit won)\n")
		:: drow != RC -> drow = RA; printf("abort marker in b1's table\n")
		fi
	};
	if
	:: found -> atomic { RUNOK -> tag(TAG); printf("commit b%d", i); commitB(i); found = 0 }
	:: else ->
		/* 2. WriteAbort with the epoch it holds: D refuses it once the
		 * epoch moved on (Fenced), or where a C row is (CommitRecorded) */
		atomic { RUNOK ->
			tag(TAG); printf("log-abort at epoch %d", MYE);
			if
#ifdef MUT_TAKER_ABORT_NO_EPOCH
			/* MUTATION: a taker's WriteAbort carries no epoch. */
			:: MYE != ep && !NOW ->
#else
			:: MYE != ep ->
#endif
				found = 2; LOST = 1; doubt = 1; printf(" -> fenced (L is at epoch %d)\n", ep);
				if
				:: NOW -> SEEN(G_STALE_TAKER)
				:: else
				fi
			:: else ->
				if
				:: row == RC -> found = 1; printf(" -> commit-recorded\n")
				:: row == RA -> printf(" -> exists\n")
				:: row == R_NONE ->
					/* A live holder's transaction is never touched by
					 * another process (the operator's rollback by hand
					 * aside): no taker presumes abort of T while T's
					 * coordinator holds L live and has not decided. */
					assert(!NOW || !(TLIVE && !decided));
					row = RA; printf(" -> ok\n")
				fi
			fi
		};
		if
		:: found == 1 -> atomic { RUNOK -> tag(TAG); printf("commit b%d", i); commitB(i); found = 0 }
		:: found == 2 -> found = 0	/* the branch stays; the scan goes on */
		:: found == 0 ->
			/* 3. roll back */
			atomic { RUNOK -> tag(TAG); printf("roll back b%d", i);
				if
				:: NOW && srv[i] == S_PREPARED -> SEEN(G_DOOMED)
				:: else
				fi;
				rollbackB(i) }
		fi
	fi
#ifdef MUT_TAKEOVER_NO_FENCE
	fi
#endif
}

inline scanBranch(i, Li, RUNOK, MYE, LOST, NOW, TAG) {
	atomic { RUNOK ->
		Li = (srv[i] == S_PREPARED);
		if
		:: Li -> tag(TAG); printf("list b%d: prepared", i)
		:: else -> tag(TAG); printf("list b%d: -\n", i)
		fi;
		if
		:: !Li
		:: Li && (rc || rrow) -> printf(", decided: commit"); acted(NOW, TAG); commitB(i)
		:: Li && !(rc || rrow) && ra -> printf(", A row: roll back"); acted(NOW, TAG); rollbackB(i)
		:: Li && !(rc || rrow) && !ra && LOST ->
			/* PresumeNever: the holder presumes, not this process */
			doubt = 1; printf(", no decision: L is another's\n")
		:: Li && !(rc || rrow) && !ra && !LOST && !NOW && !calm ->
			/* within the grace period (any clock: a free choice) */
			doubt = 1; printf(", no decision: too young\n")
		:: Li && !(rc || rrow) && !ra && !LOST -> act = V_ROLLBACK; printf(", no decision: presume abort\n")
		fi
	};
	if
	:: act == V_ROLLBACK -> presume(i, RUNOK, MYE, LOST, NOW, TAG)
	:: else
	fi
}

inline scan(RUNOK, MYE, LOST, NOW, TAG) {
	scanBranch(0, L0, RUNOK, MYE, LOST, NOW, TAG);
	scanBranch(1, L1, RUNOK, MYE, LOST, NOW, TAG)
}

/* the scan's end: forget the commit decisions whose branches no listing
 * of this scan showed (forgets are not fenced); inside the caller's last
 * step */
inline forget(TAG) {
	if
	:: rc && !L0 && !L1 && row == RC -> tag(TAG); printf("forget T's C row\n"); assert(NOPREPARED); row = R_NONE
	:: else
	fi;
	if
	:: rrow && !L0 && !L1 && drow == RC -> tag(TAG); printf("forget b1's commit row\n"); assert(NOPREPARED); drow = R_NONE
	:: else
	fi;
	L0 = 0; L1 = 0; rc = 0; rrow = 0; ra = 0
}

/* read the decisions: L's rows, b1's table */
inline readDecisions(TAG) {
	rc = (row == RC); rrow = (drow == RC); ra = (row == RA);
	tag(TAG); printf("scan: C row %d, commit row %d, A row %d\n", rc, rrow, ra)
}

/* ---- node p's own recovery (PresumeAfterGrace; PresumeNever once it
 * knows it lost L) ---- */
proctype OwnScan()
{
	bit L0, L1, rc, rrow, ra, doubt;
	byte act, found, nc, seenE, myinc = 1;
end_own:
	do
	:: {
end_scan:	do
		/* (a scan that starts with nothing prepared and no commit
		 * decision does nothing: it waits for something to do; and it
		 * waits for T's coordinator, in this process, to be done with
		 * T: their race over one log is model/xa.pml's) */
		:: atomic { prun == RUN && pE != 0 && !plost && (!NOPREPARED || row == RC || drow == RC) && CDONE &&
			(!calm || nc < CALMSCANS || pE != seenE) ->
			if
			:: pE != seenE -> seenE = pE; nc = 0
			:: else
			fi;
			if
			:: calm -> nc++
			:: else
			fi;
			readDecisions(9) }
			scan(prun == RUN, pE, plost, 0, 9);
			atomic { prun == RUN -> forget(9); doubt = 0 }
		od
	   } unless { prun == DEAD || pinc != myinc };
	   atomic { L0 = 0; L1 = 0; rc = 0; rrow = 0; ra = 0; doubt = 0; act = 0; found = 0; nc = 0; seenE = 0 };
	   /* a new process, or never (GONE) */
end_dead:  atomic { prun != DEAD -> myinc = pinc }
	od
}

/* ---- a live node's recovery.Takeover, for L ---- */

/* what D finds when a taker asks to take L over */
#ifdef MUT_TAKER_CLOCK
/* MUTATION: expiry judged by the taker's clock, which may run ahead any
 * amount: a held lease looks expired at any time. */
#define EXPIRED (1)
#else
#define EXPIRED (lexp)
#endif
#ifdef FIX_RESCAN
#define RESCAN (lh == H_NONE && lclean && (!NOPREPARED || drow == RC))
#else
#define RESCAN (0)
#endif
#define TAKEABLE ((lh != H_NONE && EXPIRED) || (lh == H_NONE && !lclean) || RESCAN)
#define TR (trun[t] == RUN)

proctype Taker(byte t)
{
	bit L0, L1, rc, rrow, ra, doubt;
	byte act, found, nc;
end_taker:
	do
	:: {
end_loop:	do
		:: atomic { TR && tE[t] == 0 && TAKEABLE ->
			printf("Q%d take over L", t);
			if
			:: lh >= H_Q && staleWhy == W_CRASHED_MID && (!NOPREPARED || row == RC) -> SEEN(G_TAKER_REPLACED)
			:: else
			fi;
			if
			:: RESCAN -> SEEN(G_RESCAN)
			:: else
			fi;
			acquire(H_Q + t); tE[t] = ep; tlost[t] = 0; tookover = 1; tmid[t] = 0; nc = 0 }
		:: atomic { TR && tE[t] != 0 && (!calm || CDONE && nc < CALMSCANS) ->
			if
			:: calm -> nc++
			:: else
			fi;
			readDecisions(t) }
			scan(TR, tE[t], tlost[t], 1, t);
			/* the scan's end; then stop once L is lost (Presumption),
			 * release L clean once nothing of it is in doubt
			 * (Takeover.Recover) */
			atomic { TR ->
				forget(t);
				if
				:: tlost[t] -> printf("Q%d stops: L was taken from it\n", t); tE[t] = 0; tlost[t] = 0
				:: !tlost[t] && !doubt && row != RC ->
					printf("Q%d release L clean", t);
					if
					:: lh == H_Q + t && ep == tE[t] -> lh = H_NONE; lclean = 1; lexp = 0; stale = 0; printf("\n")
					:: else -> printf(": not its lease any more\n")
					fi;
					tE[t] = 0
				:: else
				fi;
				doubt = 0 }
		od
	   } unless { trun[t] == DEAD };
	   atomic {
		printf("Q%d a new process replaces the crashed one\n", t);
		L0 = 0; L1 = 0; rc = 0; rrow = 0; ra = 0; doubt = 0; act = 0; found = 0; nc = 0;
		tE[t] = 0; tlost[t] = 0; trun[t] = RUN }
	od
}

/* ---- an operator's rollback by hand (xactl rollback, no lease): the
 * same fence, with a WriteAbort that carries no epoch ---- */
proctype Hand()
{
	byte i, found;
end_hand:
	do
	:: atomic { !calm && hands > 0 && !NOPREPARED && row != RC && drow != RC ->
		hands--;
		if
		:: srv[0] == S_PREPARED -> i = 0
		:: srv[1] == S_PREPARED -> i = 1
		fi;
		printf("X  xactl rollback b%d\n", i) };
		atomic {
			if
			:: drow == RC -> found = 1; printf("X  abort marker: duplicate key (committed)\n")
			:: else -> drow = RA; printf("X  abort marker in b1's table\n")
			fi };
		if
		:: !found -> atomic {
			printf("X  log-abort (no epoch)");
			if
			:: row == RC -> found = 1; printf(" -> commit-recorded\n")
			:: row == RA -> printf(" -> exists\n")
			:: row == R_NONE -> row = RA; printf(" -> ok\n")
			fi }
		:: else
		fi;
		if
		:: !found -> atomic { printf("X  roll back b%d", i); rollbackB(i) }
		:: else
		fi;
		atomic { i = 0; found = 0 }
	od
}

/* ---- the environment: D's clock and WriteCommit, the processes'
 * lease renewals, pauses, crashes ---- */

#ifdef MUT_NO_EPOCH_COMMIT
/* MUTATION: WriteCommit does not check the epoch. */
#define EPOK (1)
#else
#define EPOK (wcq == ep)
#endif

#define HOLDSP (lh == H_P && ep == pE)
#define HOLDST(t) (lh == H_Q + t && ep == tE[t])

/* a taker's lease: renewal, pause, crash, resumption */
#define TAKERENV(t) \
	:: atomic { trun[t] == RUN && tE[t] != 0 && !tlost[t] && (!HOLDST(t) || stale || lexp) -> \
		printf("Q%d renew", t); \
		if \
		:: HOLDST(t) -> lexp = 0; stale = 0; printf(" -> ok\n") \
		:: else -> tlost[t] = 1; printf(" -> lost\n") \
		fi } \
	:: atomic { !calm && tpauses > 0 && trun[t] == RUN && tE[t] != 0 -> \
		tpauses--; trun[t] = PAUSED; stops(H_Q + t, tE[t], W_PAUSED); printf("Q%d pauses\n", t) } \
	:: atomic { trun[t] == PAUSED -> trun[t] = RUN; printf("Q%d resumes\n", t) } \
	:: atomic { !calm && tcrash > 0 && trun[t] != DEAD && tE[t] != 0 -> \
		tcrash--; \
		if \
		:: tmid[t] -> stops(H_Q + t, tE[t], W_CRASHED_MID) \
		:: else -> stops(H_Q + t, tE[t], W_CRASHED) \
		fi; \
		trun[t] = DEAD; printf("Q%d crashes\n", t) }

active proctype Env()
{
	byte x;
end:	do
	/* D's clock: the lease of a holder that stopped renewing expires */
	:: atomic { lh != H_NONE && stale && !lexp ->
		lexp = 1; printf("D  the lease of "); prHolder(lh); printf(" (epoch %d) expires\n", ep) }
	/* D runs T's WriteCommit: one transaction */
	:: atomic { wcq != 0 ->
		printf("D  write-commit at epoch %d", wcq);
		if
#ifndef MUT_NO_EPOCH_COMMIT
		:: wcq != ep -> x = W_FENCED; printf(" -> fenced (L is at epoch %d)", ep)
#endif
		:: EPOK && row == RA -> x = W_ABORTREC; printf(" -> abort-recorded")
		:: EPOK && row == RC -> x = W_OK; printf(" -> ok (there already)")
		:: EPOK && row == R_NONE ->
#ifndef NO_CLOSURE_CHECK
			/* Closure: no C row with an epoch older than epoch(L) */
			assert(wcq == ep);
#endif
			row = RC; x = W_OK; printf(" -> ok, C row")
		:: EPOK && row == R_NONE -> x = W_TOOLATE; printf(" -> too late (by D's clock)")
		fi;
		if
		:: wcl -> wcr = x; printf("\n")
		:: else -> printf(" (nobody listens)\n")
		fi;
		wcq = 0; x = 0 }
	:: atomic { wcq != 0 && !wcl -> wcq = 0; printf("D  the write-commit never arrives\n") }
	/* node p's process: renewal, taking L back, pauses, crashes */
	:: atomic { prun == RUN && pE != 0 && !plost && (!HOLDSP || stale || lexp) ->
		printf("P  renew");
		if
		:: HOLDSP -> lexp = 0; stale = 0; printf(" -> ok\n")
		:: else -> plost = 1; printf(" -> lost (L is at epoch %d)\n", ep)
		fi }
	:: atomic { prun == RUN && (pE == 0 || plost) && (lh == H_NONE || lexp) ->
		printf("P  take L");
		if
		:: tookover -> SEEN(G_NEW_EPOCH)
		:: else
		fi;
		acquire(H_P); pE = ep; plost = 0 }
	:: atomic { !calm && pauses > 0 && prun == RUN ->
		pauses--; prun = PAUSED; stops(H_P, pE, W_PAUSED);
		if
		:: HOLDSP && pinc == 1 -> zombie = 1
		:: else
		fi;
		printf("P  pauses\n") }
	:: atomic { prun == PAUSED -> prun = RUN; printf("P  resumes\n") }
	:: atomic { !calm && pcrash > 0 && prun != DEAD ->
		pcrash--; stops(H_P, pE, W_CRASHED); wcl = 0; wcr = 0;
		printf("P  crashes");
		/* its sessions close: unprepared branches roll back */
		if
		:: srv[0] == S_ACTIVE -> srv[0] = S_ROLLEDBACK; printf("; b0 rolls back")
		:: else
		fi;
		if
		:: srv[1] == S_ACTIVE -> srv[1] = S_ROLLEDBACK; printf("; b1 rolls back")
		:: else
		fi;
#ifdef GONE
		prun = DEAD; printf("; for good\n")
#else
		/* a new process starts; it takes L back when D lets it (the
		 * time it takes is a free choice: a process without the lease
		 * does nothing else) */
		pinc++; prun = RUN; pE = 0; plost = 0; printf("; a new process starts\n")
#endif
	}
	/* the takers */
	TAKERENV(0)
#if TAKERS > 1
	TAKERENV(1)
#endif
	/* faults stop: paused processes have resumed, no write in flight */
	:: atomic { !calm && prun != PAUSED && trun[0] != PAUSED &&
#if TAKERS > 1
		trun[1] != PAUSED &&
#endif
		wcq == 0 -> calm = 1; printf("-- faults stop\n") }
	od
}

/* ---- termination: once faults stop and everything has come to rest,
 * every branch has ended as the caller was told, every commit decision is
 * forgotten, and L is released clean or held by its node's live process.
 * (Abort rows and markers stay: their retention, 24 h, is beyond this
 * model; model/xa.pml checks their forgetting.) ---- */
active proctype Judge()
{
	timeout ->
	printf("-- at rest\n");
	assert(srv[0] != S_PREPARED && srv[1] != S_PREPARED && srv[0] != S_ACTIVE && srv[1] != S_ACTIVE);
	assert(told != T_COMMITTED || (srv[0] == S_COMMITTED && srv[1] == S_COMMITTED));
	assert(told != T_ABORTED || !ANYC);
	assert(row != RC && drow != RC);
	assert((lh == H_NONE && lclean) || (lh == H_P && HOLDSP && prun == RUN && !plost))
}

init
{
	atomic {
		run Coord();
		run OwnScan();
		run Taker(0);
#if TAKERS > 1
		run Taker(1);
#endif
#if HAND > 0
		run Hand();
#endif
	}
}
