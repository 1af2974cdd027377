/*
 * sink.pml: the exactly-once sink's checkpoint protocol (docs/sink.md) as
 * a Promela model for spin. A replayable source of N records in one
 * partition, one target table (each record one row), and the progress
 * target that holds the partition's progress row (epoch, owner,
 * position) and the decision rows and abort markers, keyed by
 * (incarnation, checkpoint). docs/model.md says what is modelled and what
 * is not, the configurations and the counterexamples. Run it with
 * model/check (or go test ./model).
 *
 * Two drivers, one at a time:
 *   self-driven (default): instances (sink.Runner over the SQL sink), each
 *     with its own incarnation, that take the partition (raising its
 *     epoch), restore (sink.Classify, the fence), read from the committed
 *     position and checkpoint: write, prepare, decide (the progress row's
 *     update WHERE epoch AND owner, and the decision row, in one
 *     transaction), phase 2. Any instance may be delayed at any step (a
 *     zombie past its session: spin interleaves freely) and the first may
 *     crash.
 *   EXTERNAL: generations of an externally driven job (sink.External):
 *     each registers its generation (xa_sink_generations), restores from
 *     the caller's latest completed checkpoint (commits its handle, then
 *     AbortLingering), and writes, pre-commits, completes and commits
 *     checkpoints; member 0 writes, member 1 is the global committer that
 *     commits member 0's handles. An earlier generation goes on as a
 *     zombie.
 *
 * Knobs (-D on the spin command line):
 *   N=2|3       records
 *   INSTANCES=2|3  self-driven instances (incarnations 1..INSTANCES); the
 *               first owns the partition at the start, each other takes
 *               it over at any time (a rebalance, a restart, a newcomer)
 *   CRASHES=0|1 instance 1 may crash (its session ends: an unprepared
 *               branch rolls back; a prepared one stays)
 *   LOSSES=n    a decision's reply lost (written or not: a free choice)
 *   TWO         self-driven over two partitions of one record each: instance
 *               2 takes partition 1 or both; restore may fence a young
 *               branch of an instance that owns a partition (the grace)
 *   GENS=2|3    (EXTERNAL) generations
 *   MAXCK=n     checkpoints an instance or generation begins at most
 *   MUT_...     a mutation, which must fail: see each #ifdef below
 *   REACH=G_..  a reachability probe: fails once the events in the mask
 *               have happened
 * spin -t replays a counterexample; its events print one a line: "I1"..
 * an instance (self-driven), "G1".. a generation (EXTERNAL), "T" the
 * target, "K" the progress target, "--" phases.
 *
 * Names, model -> Go (sink/, sink/sqlsink on main as of issue 15):
 *   pepoch powner ppos -> xa_sink_progress (epoch, owner, position)
 *   dec[k] -> xa_sink_decisions: D_COMMIT a decision row (aborted = false),
 *   D_ABORT an abort marker (aborted = true)
 *   bst[k] blo[k] bhi[k] -> the branch xs1.S.I.C/target and the records
 *   it wrote
 *   take() -> instance.Take (store take: epoch + 1, owner = I), then
 *   restore() -> instance.Sweep / resolve with sink.Classify
 *   decide -> store decide (self-driven: UPDATE ... WHERE epoch = E AND
 *   owner = I, INSERT decision; errEpochMoved), instance.decide (the
 *   claim after an unknown outcome)
 *   genrow -> xa_sink_generations; register -> External's registration;
 *   xdecide -> instance.decideExternal (the committer's generation fence)
 */

#ifndef N
#define N 2
#endif
#ifndef INSTANCES
#define INSTANCES 2
#endif
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef LOSSES
#define LOSSES 1
#endif
#ifndef GENS
#define GENS 2
#endif
#ifndef MAXCK
#define MAXCK 3
#endif

/* decision rows */
#define D_NONE   0
#define D_COMMIT 1
#define D_ABORT  2

/* a branch */
#define B_NONE       0
#define B_ACTIVE     1
#define B_PREPARED   2
#define B_COMMITTED  3
#define B_ROLLEDBACK 4

/* the answer to a decision */
#define R_OK      1
#define R_EPOCH   2   /* errEpochMoved: the partition (or generation) moved on */
#define R_MARKED  3   /* a row holds the key: an abort marker */
#define R_UNKNOWN 4   /* an error, or a lost reply: written or not */

#ifdef EXTERNAL
#define NINC GENS
#else
#define NINC INSTANCES
#endif
#define NKEY (NINC * MAXCK)
#define KEY(i, c) (((i) - 1) * MAXCK + (c) - 1)

/* ---- the target: rows landed per record ---- */
byte landed[N];

/* ---- the progress target ---- */
byte pepoch = 1;     /* instance 1 took the partition at epoch 1 */
byte powner = 1;
byte ppos;           /* the committed position: records before it landed */
byte dec[NKEY];

#ifdef TWO
/* (TWO) per partition: epoch, owner, position (0 or 1) */
byte pe[2] = 1;
byte po[2] = 1;
byte pp[2];
#endif

/* ---- branches ---- */
byte bst[NKEY];
byte blo[NKEY];
byte bhi[NKEY];

/* ---- faults ---- */
byte crashes = CRASHES;
byte losses = LOSSES;
bit  crashed;        /* instance 1 crashed */

/* ---- ghosts ---- */
byte due[N];         /* decided commit, phase 2 not done: will land */
bit  finished;       /* the last owner read every record and committed it */

/* ---- reachability probes ---- */
#define G_EPOCH_REFUSED  1   /* a zombie's decision refused: the epoch moved */
#define G_FENCED         2   /* restore fenced a branch: marker, rollback */
#define G_ORPHAN_COMMIT  4   /* restore committed another instance's decided branch */
#define G_CLAIM_ABORT    8   /* an unknown decision settled by the marker: aborted */
#define G_LATE_PREPARE  16   /* an instance prepared after its partition was taken */
#define G_GEN_REFUSED   32   /* (EXTERNAL) a zombie committer refused by the generation */
#define G_LINGER        64   /* (EXTERNAL) AbortLingering fenced a zombie's branch */
#define G_GRACE        128   /* (TWO) restore fenced a young branch of an instance that owns a partition */
#define G_MARKED       256   /* (TWO) a decision refused by a marker */
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
/* Exactly once, and positions never run ahead of rows: no record lands
 * twice; a record below the committed position has landed or is decided
 * (its branch commits); a record at or above it has not landed (self-driven:
 * the progress row is the truth; externally driven the caller's state is,
 * and the Judge checks the end). */
byte r_;
#ifdef EXTERNAL
#define POSOK(r) (1)
#elif defined(TWO)
#define POSOK(r) ((pp[r] == 1 && landed[r] + due[r] >= 1) || (pp[r] == 0 && landed[r] == 0))
#else
#define POSOK(r) ((r < ppos && landed[r] + due[r] >= 1) || (r >= ppos && landed[r] == 0))
#endif

active proctype Monitor()
{
	byte r;
end:	atomic {
		(landed[0] > 1 || !POSOK(0)
#if N > 1
		|| landed[1] > 1 || !POSOK(1)
#endif
#if N > 2
		|| landed[2] > 1 || !POSOK(2)
#endif
		) ->
		r = 0;
		do
		:: r < N -> assert(landed[r] <= 1); assert(POSOK(r)); r++
		:: else -> break
		od
	}
}

/* ---- the target's operations ---- */

inline commitB(k) {
	if
	:: bst[k] == B_PREPARED ->
		bst[k] = B_COMMITTED; r_ = blo[k];
		do
		:: r_ < bhi[k] -> landed[r_]++; if :: due[r_] > 0 -> due[r_]-- :: else fi; r_++
		:: else -> break
		od;
		r_ = 0; printf(" -> ok\n")
	:: else -> printf(" -> unknown xid (done)\n")
	fi
}

inline rollbackB(k) {
	if
	:: bst[k] == B_PREPARED || bst[k] == B_ACTIVE ->
		/* a decided branch is never rolled back */
		assert(dec[k] != D_COMMIT);
		bst[k] = B_ROLLEDBACK; printf(" -> ok\n")
	:: else -> printf(" -> unknown xid (done)\n")
	fi
}

/* the decision commits: its records become due */
inline decided(k) {
	dec[k] = D_COMMIT; r_ = blo[k];
	do
	:: r_ < bhi[k] -> due[r_]++; r_++
	:: else -> break
	od;
	r_ = 0
}

/* claim the abort marker (store claim): the row under the key, either the
 * decision that was there, or the marker inserted now */
inline claim(k, got) {
	if
	:: dec[k] == D_NONE -> dec[k] = D_ABORT
	:: else
	fi;
	got = dec[k]
}

#if !defined(EXTERNAL) && !defined(TWO)
/* ---- self-driven: an instance ---- */

/* instance 1 is the one that may crash */
#define ALIVE (me != 1 || !crashed)

/* restore (resolve with sink.Classify, self-driven rules), one branch at a
 * time: list it and read its decision and the owners (one step: see
 * docs/model.md), then act. Its own in-flight checkpoint is never one: it
 * restores between checkpoints. */
inline restore() {
	k = 0;
	do
	:: k < NKEY ->
		atomic { ALIVE ->
			act = 0;
			if
			:: bst[k] == B_PREPARED ->
				d = dec[k];
#ifdef MUT_RESTORE_IGNORES_MARKERS
				/* MUTATION: restore reads any row under the key as
				 * the decision, ignoring that it is an abort marker. */
				if :: d == D_ABORT -> d = D_COMMIT :: else fi;
#endif
				if
				:: d == D_COMMIT -> act = 1
				:: d == D_ABORT -> act = 2
				:: d == D_NONE && (k / MAXCK + 1 == me || powner != k / MAXCK + 1) -> act = 3
				:: else	/* a young branch of a live owner: left */
				fi
			:: else
			fi };
		if
		:: act == 1 -> atomic { ALIVE -> printf("I%d restore: commit %d.%d (decided)", me, k / MAXCK + 1, k % MAXCK + 1);
			if :: k / MAXCK + 1 != me -> SEEN(G_ORPHAN_COMMIT) :: else fi;
			commitB(k) }
		:: act == 2 -> atomic { ALIVE -> printf("I%d restore: roll back %d.%d (marker)", me, k / MAXCK + 1, k % MAXCK + 1); rollbackB(k) }
		:: act == 3 ->
			/* the fence: claim the marker; the decision may hold the key */
			atomic { ALIVE ->
				printf("I%d restore: fence %d.%d", me, k / MAXCK + 1, k % MAXCK + 1);
claim(k, d);
				if
				:: d == D_COMMIT -> printf(": the decision holds the key\n")
				:: else -> printf(": marker\n"); SEEN(G_FENCED)
				fi };
			atomic { ALIVE ->
				if
				:: d == D_COMMIT -> printf("I%d restore: commit %d.%d", me, k / MAXCK + 1, k % MAXCK + 1); commitB(k)
				:: else -> printf("I%d restore: roll back %d.%d", me, k / MAXCK + 1, k % MAXCK + 1); rollbackB(k)
				fi }
		:: else
		fi;
		k++
	:: else -> k = 0; break
	od
}

proctype Instance(byte me)
{
	byte E, pos, ck, k, act, d, res, hi;
	bit own;
	{
	if
	:: me == 1 -> atomic { E = 1; pos = 0; own = 1; printf("I1 owns the partition at epoch 1\n") }
	:: else ->
		/* take the partition: epoch + 1, owner = me, read its position
		 * (one transaction; instance.Take) */
		atomic { pepoch++; powner = me; E = pepoch; pos = ppos; own = 1;
			printf("I%d take the partition -> epoch %d, position %d\n", me, E, pos) };
		restore()
	fi;
	do
	:: atomic { ALIVE && own && pos >= N ->
		/* the source is at its end; the periodic sweep still runs */
		finished = 1 };
		break
	:: atomic { ALIVE && own && pos < N && ck >= MAXCK -> printf("I%d stops: too many aborts\n", me) }; break
	:: atomic { ALIVE && own && pos < N && ck < MAXCK ->
		/* write a checkpoint of one or two records from pos */
		ck++; k = KEY(me, ck);
		if
		:: hi = pos + 1
		:: pos + 2 <= N -> hi = pos + 2
		fi;
		blo[k] = pos; bhi[k] = hi; bst[k] = B_ACTIVE;
		printf("I%d write %d.%d: records %d..%d\n", me, me, ck, pos, hi - 1) };
		atomic { ALIVE -> bst[k] = B_PREPARED; printf("I%d prepare %d.%d\n", me, me, ck);
			if :: powner != me -> SEEN(G_LATE_PREPARE) :: else fi };
		/* decide: one transaction on the progress target; with a lost
		 * reply left, an error may come instead (before or after it ran) */
		atomic { ALIVE ->
			printf("I%d decide %d.%d at epoch %d", me, me, ck, E);
			if
			:: losses > 0 -> losses--; res = R_UNKNOWN; printf(" -> an error: not written\n")
			:: true ->
				if
#ifdef MUT_NO_EPOCH
				/* MUTATION: the decision does not check the epoch. */
				:: false ->
#else
				:: pepoch != E || powner != me ->
#endif
					res = R_EPOCH; printf(" -> epoch moved (the partition is at %d)\n", pepoch)
				:: else ->
					if
					:: dec[k] != D_NONE -> res = R_MARKED; printf(" -> the key is marked\n")
					:: else -> ppos = hi; decided(k); res = R_OK; printf(" -> decided, position %d\n", hi)
					fi
				fi;
				if
				:: losses > 0 -> losses--; res = R_UNKNOWN; printf("I%d the reply is lost\n", me)
				:: true
				fi
			fi };
		if
		:: res == R_UNKNOWN ->
#ifdef MUT_UNKNOWN_ABORTS
			/* MUTATION: an unknown decision is taken as refused,
			 * without claiming the marker. */
			res = R_MARKED
#else
			/* instance.decide: claim the marker to learn the fate */
			atomic { ALIVE ->
claim(k, d);
				if
				:: d == D_COMMIT -> res = R_OK; printf("I%d claim: the decision holds the key\n", me)
				:: else -> res = R_MARKED; printf("I%d claim: marker\n", me); SEEN(G_CLAIM_ABORT)
				fi }
#endif
		:: else
		fi;
		if
		:: res == R_OK ->
			atomic { ALIVE -> printf("I%d commit %d.%d", me, me, ck); commitB(k); pos = bhi[k] }
		:: else ->
			if
			:: res == R_EPOCH && me != 1 -> SEEN(G_EPOCH_REFUSED)
			:: res == R_EPOCH && me == 1 && powner != 1 -> SEEN(G_EPOCH_REFUSED)
			:: else
			fi;
			atomic { ALIVE -> printf("I%d roll back %d.%d", me, me, ck); rollbackB(k) };
			/* rewind: read the committed position back; a partition
			 * that moved on is lost */
			atomic { ALIVE ->
				if
				:: pepoch == E && powner == me -> pos = ppos; printf("I%d rewind to %d\n", me, pos)
				:: else -> own = 0; printf("I%d lost the partition: stops (fenced)\n", me)
				fi }
		fi
	:: atomic { ALIVE && !own -> skip }; break
	od;
	/* the periodic sweep, while it runs and owns the partition: orphans
	 * of instances that own nothing any more */
end_sweep:
	do
	:: atomic { ALIVE && own && pepoch == E && powner == me &&
		(bst[0] == B_PREPARED
#if NKEY > 1
		|| bst[1] == B_PREPARED
#endif
#if NKEY > 2
		|| bst[2] == B_PREPARED
#endif
#if NKEY > 3
		|| bst[3] == B_PREPARED
#endif
#if NKEY > 4
		|| bst[4] == B_PREPARED
#endif
#if NKEY > 5
		|| bst[5] == B_PREPARED
#endif
#if NKEY > 6
		|| bst[6] == B_PREPARED
#endif
#if NKEY > 7
		|| bst[7] == B_PREPARED
#endif
#if NKEY > 8
		|| bst[8] == B_PREPARED
#endif
		) -> printf("I%d sweep\n", me) };
		restore()
	od
	} unless { me == 1 && crashed }
}

/* instance 1 crashes: its sessions end (an unprepared branch rolls back) */
active proctype Crash()
{
	byte k;
end:	atomic { crashes > 0 ->
		crashes--; crashed = 1; printf("I1 crashes\n");
		k = 0;
		do
		:: k < MAXCK -> if :: bst[k] == B_ACTIVE -> bst[k] = B_ROLLEDBACK :: else fi; k++
		:: else -> break
		od }
}

/* ---- at rest: once the last owner finished, every record landed exactly
 * once and no branch is left prepared ---- */
active proctype Judge()
{
	byte r, k;
	timeout ->
	printf("-- at rest\n");
	if
	:: finished ->
		r = 0;
		do
		:: r < N -> assert(landed[r] == 1); r++
		:: else -> break
		od;
		assert(ppos == N);
		k = 0;
		do
		:: k < NKEY -> assert(bst[k] != B_PREPARED); k++
		:: else -> break
		od
	:: else
	fi
}

init
{
	atomic {
		run Instance(1);
		run Instance(2);
#if INSTANCES > 2
		run Instance(3);
#endif
	}
}

#elif defined(TWO)
/* ---- self-driven, two partitions (TWO): record p is partition p's one
 * record; instance 1 owns both at epoch 1; instance 2 takes partition 1,
 * or both, at any moment; restore may fence a young branch of an
 * instance that still owns a partition (older than the grace: a free
 * choice), whose decision then meets the marker ---- */

byte bm[NKEY];       /* the partitions (records) a branch wrote */
bit  done[3];        /* the instance read everything it owns */

#define ALIVE (me != 1 || !crashed)
#define OWNS(j) (po[0] == (j) || po[1] == (j))
#define FOREIGN(k) (bst[k] == B_PREPARED && (k) / MAXCK + 1 != me)

inline commit2(k) {
	if
	:: bst[k] == B_PREPARED ->
		bst[k] = B_COMMITTED;
		if :: bm[k] & 1 -> landed[0]++; if :: due[0] > 0 -> due[0]-- :: else fi :: else fi;
		if :: bm[k] & 2 -> landed[1]++; if :: due[1] > 0 -> due[1]-- :: else fi :: else fi;
		printf(" -> ok\n")
	:: else -> printf(" -> unknown xid (done)\n")
	fi
}

inline decided2(k) {
	dec[k] = D_COMMIT;
	if :: bm[k] & 1 -> due[0]++; pp[0] = 1 :: else fi;
	if :: bm[k] & 2 -> due[1]++; pp[1] = 1 :: else fi
}

inline restore2() {
	k = 0;
	do
	:: k < NKEY ->
		atomic { ALIVE ->
			act = 0;
			if
			:: bst[k] == B_PREPARED && k / MAXCK + 1 != me ->
				d = dec[k];
#ifdef MUT_RESTORE_IGNORES_MARKERS
				if :: d == D_ABORT -> d = D_COMMIT :: else fi;
#endif
				if
				:: d == D_COMMIT -> act = 1
				:: d == D_ABORT -> act = 2
				:: d == D_NONE && !OWNS(k / MAXCK + 1) -> act = 3
				:: d == D_NONE && OWNS(k / MAXCK + 1) -> act = 3; SEEN(G_GRACE)	/* older than the grace */
				:: d == D_NONE && OWNS(k / MAXCK + 1)	/* young: left */
				fi
			:: else
			fi };
		if
		:: act == 1 -> atomic { ALIVE -> printf("I%d restore: commit %d.%d (decided)", me, k / MAXCK + 1, k % MAXCK + 1); SEEN(G_ORPHAN_COMMIT); commit2(k) }
		:: act == 2 -> atomic { ALIVE -> printf("I%d restore: roll back %d.%d (marker)", me, k / MAXCK + 1, k % MAXCK + 1); rollbackB(k) }
		:: act == 3 ->
			atomic { ALIVE -> printf("I%d restore: fence %d.%d", me, k / MAXCK + 1, k % MAXCK + 1);
				claim(k, d);
				if
				:: d == D_COMMIT -> printf(": the decision holds the key\n")
				:: else -> printf(": marker\n"); SEEN(G_FENCED)
				fi };
			atomic { ALIVE ->
				if
				:: d == D_COMMIT -> printf("I%d restore: commit %d.%d", me, k / MAXCK + 1, k % MAXCK + 1); commit2(k)
				:: else -> printf("I%d restore: roll back %d.%d", me, k / MAXCK + 1, k % MAXCK + 1); rollbackB(k)
				fi }
		:: else
		fi;
		k++
	:: else -> k = 0; break
	od
}

proctype Instance(byte me)
{
	byte E[2], pos[2], ck, k, act, d, res, m;
	bit own[2];
	{
	if
	:: me == 1 -> atomic { E[0] = 1; E[1] = 1; own[0] = 1; own[1] = 1; printf("I1 owns partitions 0 and 1 at epoch 1\n") }
	:: else ->
		atomic {
			if
			:: skip
			:: pe[0]++; po[0] = me; E[0] = pe[0]; own[0] = 1; pos[0] = pp[0]
			fi;
			pe[1]++; po[1] = me; E[1] = pe[1]; own[1] = 1; pos[1] = pp[1];
			printf("I%d take partitions %d..1\n", me, 1 - own[0]) };
		restore2()
	fi;
	do
	:: atomic { ALIVE && (own[0] || own[1]) && !(own[0] && pos[0] == 0) && !(own[1] && pos[1] == 0) ->
		done[me] = 1 };
		break
	:: atomic { ALIVE && ((own[0] && pos[0] == 0) || (own[1] && pos[1] == 0)) && ck >= MAXCK -> printf("I%d stops: too many aborts\n", me) }; break
	:: atomic { ALIVE && ((own[0] && pos[0] == 0) || (own[1] && pos[1] == 0)) && ck < MAXCK ->
		ck++; k = KEY(me, ck);
		m = 0;
		if :: own[0] && pos[0] == 0 -> m = m | 1 :: else fi;
		if :: own[1] && pos[1] == 0 -> m = m | 2 :: else fi;
		bm[k] = m; bst[k] = B_ACTIVE;
		printf("I%d write %d.%d: partitions %d\n", me, me, ck, m) };
		atomic { ALIVE -> bst[k] = B_PREPARED; printf("I%d prepare %d.%d\n", me, me, ck) };
		atomic { ALIVE ->
			printf("I%d decide %d.%d", me, me, ck);
			if
			:: losses > 0 -> losses--; res = R_UNKNOWN; printf(" -> an error: not written\n")
			:: true ->
				if
#ifdef MUT_NO_EPOCH
				:: false ->
#elif defined(MUT_FIRST_EPOCH)
				/* MUTATION: only the first partition's epoch is checked. */
				:: ((m & 1) && (pe[0] != E[0] || po[0] != me)) || (m == 2 && (pe[1] != E[1] || po[1] != me)) ->
#else
				:: ((m & 1) && (pe[0] != E[0] || po[0] != me)) || ((m & 2) && (pe[1] != E[1] || po[1] != me)) ->
#endif
					res = R_EPOCH; printf(" -> an epoch moved\n")
				:: else ->
					if
					:: dec[k] != D_NONE -> res = R_MARKED; printf(" -> the key is marked\n"); SEEN(G_MARKED)
					:: else -> decided2(k); res = R_OK; printf(" -> decided\n")
					fi
				fi;
				if
				:: losses > 0 -> losses--; res = R_UNKNOWN; printf("I%d the reply is lost\n", me)
				:: true
				fi
			fi };
		if
		:: res == R_UNKNOWN ->
			atomic { ALIVE -> claim(k, d);
				if
				:: d == D_COMMIT -> res = R_OK; printf("I%d claim: the decision holds the key\n", me)
				:: else -> res = R_MARKED; printf("I%d claim: marker\n", me); SEEN(G_CLAIM_ABORT)
				fi }
		:: else
		fi;
		if
		:: res == R_OK ->
			atomic { ALIVE -> printf("I%d commit %d.%d", me, me, ck); commit2(k);
				if :: m & 1 -> pos[0] = 1 :: else fi;
				if :: m & 2 -> pos[1] = 1 :: else fi }
		:: else ->
			if :: res == R_EPOCH -> SEEN(G_EPOCH_REFUSED) :: else fi;
			atomic { ALIVE -> printf("I%d roll back %d.%d", me, me, ck); rollbackB(k) };
			/* rewind every partition it owns; the ones that moved on are lost */
			atomic { ALIVE ->
				if
				:: own[0] && pe[0] == E[0] && po[0] == me -> pos[0] = pp[0]
				:: own[0] && !(pe[0] == E[0] && po[0] == me) -> own[0] = 0; printf("I%d lost partition 0\n", me)
				:: else
				fi;
				if
				:: own[1] && pe[1] == E[1] && po[1] == me -> pos[1] = pp[1]
				:: own[1] && !(pe[1] == E[1] && po[1] == me) -> own[1] = 0; printf("I%d lost partition 1\n", me)
				:: else
				fi }
		fi
	/* the periodic sweep beside the writes */
	:: atomic { ALIVE && (own[0] || own[1]) && (FOREIGN(0) || FOREIGN(1) || FOREIGN(2) || FOREIGN(3) || FOREIGN(4) || FOREIGN(5)) ->
		printf("I%d sweep\n", me) };
		restore2()
	:: atomic { ALIVE && !own[0] && !own[1] -> printf("I%d owns nothing: stops (fenced)\n", me) }; break
	od;
end_sweep:
	do
	:: atomic { ALIVE && done[me] && OWNS(me) && (FOREIGN(0) || FOREIGN(1) || FOREIGN(2) || FOREIGN(3) || FOREIGN(4) || FOREIGN(5)) ->
		printf("I%d sweep\n", me) };
		restore2()
	od
	} unless { me == 1 && crashed }
}

active proctype Crash()
{
	byte k;
end:	atomic { crashes > 0 ->
		crashes--; crashed = 1; printf("I1 crashes\n");
		k = 0;
		do
		:: k < MAXCK -> if :: bst[k] == B_ACTIVE -> bst[k] = B_ROLLEDBACK :: else fi; k++
		:: else -> break
		od }
}

/* ---- at rest: a partition whose owner read all it owns has its record
 * landed once; no record landed twice ---- */
active proctype Judge()
{
	byte p;
	timeout ->
	printf("-- at rest\n");
	p = 0;
	do
	:: p < 2 ->
		assert(landed[p] <= 1);
		if
		:: done[po[p]] -> assert(landed[p] == 1 && pp[p] == 1)
		:: else
		fi;
		p++
	:: else -> break
	od
}

init
{
	atomic {
		run Instance(1);
		run Instance(2)
	}
}

#else
/* ---- externally driven: generations ---- */

byte genrow = 1;     /* xa_sink_generations: generation 1 registered */
/* the caller's checkpoint store: the latest completed checkpoint, its
 * position (the records before it are its), and its handle's key */
byte cck, cpos, ckey = 255;

/* the committer of generation g decides key k (decideExternal): the
 * generation fence read under a lock, in the decision's transaction */
inline xdecide(g, k, res) {
	if
#ifdef MUT_FENCE_OWN_ONLY
	/* MUTATION: the fence checks only a member deciding its own
	 * handles; the global committer (member 1) commits member 0's. */
	:: false ->
#else
	:: genrow > g ->
#endif
		res = R_EPOCH; printf(" -> fenced: generation %d registered\n", genrow)
	:: else ->
		if
		:: dec[k] == D_COMMIT -> res = R_OK; printf(" -> decided already\n")
		:: dec[k] == D_ABORT -> res = R_MARKED; printf(" -> the key is marked\n")
		:: dec[k] == D_NONE -> decided(k); res = R_OK; printf(" -> decided\n")
		fi
	fi
}

proctype Gen(byte g)
{
	byte pos, t, k = 255, d, res, hi, n;
	/* generation 1 starts the job afresh; a later one is a restart:
	 * it registers (External; refused below the highest registered) and
	 * restores from the caller's latest completed checkpoint, read at
	 * the registration (the caller's restart begins there, and a
	 * checkpoint completes only in the generation that is current) */
	if
	:: g > 1 ->
		atomic {
			if
			:: genrow > g -> printf("G%d register -> a later generation is registered\n", g); goto stop
			:: else -> genrow = g; n = cck; pos = cpos; k = ckey;
				printf("G%d register; restore from checkpoint %d, position %d\n", g, n, pos)
			fi }
	:: else
	fi;
	if
	:: k != 255 ->
		atomic { printf("G%d restore: commit the handle %d.%d", g, k / MAXCK + 1, k % MAXCK + 1); xdecide(g, k, res) };
		if
		:: res == R_OK -> atomic { printf("G%d restore: commit", g); commitB(k) }
		:: else -> goto stop
		fi
	:: else
	fi;
	/* AbortLingering: fence every undecided branch of an earlier
	 * generation numbered above n */
	k = 0;
	do
	:: k < NKEY ->
		if
		:: atomic { bst[k] == B_PREPARED && k / MAXCK + 1 < g && k % MAXCK + 1 > n ->
			printf("G%d lingering %d.%d", g, k / MAXCK + 1, k % MAXCK + 1);
claim(k, d);
			if
			:: d == D_COMMIT -> printf(": decided, commit"); commitB(k)
			:: else -> printf(": marker, roll back"); SEEN(G_LINGER); rollbackB(k)
			fi }
		:: atomic { bst[k] == B_PREPARED && dec[k] == D_COMMIT && !(k / MAXCK + 1 < g && k % MAXCK + 1 > n) ->
			printf("G%d restore: commit %d.%d (decided)", g, k / MAXCK + 1, k % MAXCK + 1); commitB(k) }
		:: atomic { bst[k] == B_PREPARED && dec[k] == D_ABORT ->
			printf("G%d restore: roll back %d.%d (marker)", g, k / MAXCK + 1, k % MAXCK + 1); rollbackB(k) }
		:: else
		fi;
		k++
	:: else -> break
	od;
	/* transactions numbered from n + 1 */
	t = n;
	do
	:: pos >= N ->
		if
		:: g == GENS -> finished = 1
		:: else
		fi;
		break
	:: pos < N && t >= MAXCK -> break
	:: pos < N && t < MAXCK ->
		atomic {
			t++; k = KEY(g, t);
			if
			:: hi = pos + 1
			:: pos + 2 <= N -> hi = pos + 2
			fi;
			blo[k] = pos; bhi[k] = hi; bst[k] = B_ACTIVE;
			printf("G%d write %d.%d: records %d..%d\n", g, g, t, pos, hi - 1) };
		atomic { bst[k] == B_ACTIVE -> bst[k] = B_PREPARED; printf("G%d pre-commit %d.%d under checkpoint %d\n", g, g, t, t) };
		/* the checkpoint completes: the caller's store takes it only
		 * from the current generation */
		atomic {
			if
			:: genrow == g -> cck = t; cpos = hi; ckey = k; printf("G%d checkpoint %d completes\n", g, t)
			:: else -> printf("G%d checkpoint %d completes in the zombie's view only\n", g, t)
			fi };
		/* the global committer (member 1) commits member 0's handle */
		atomic { printf("G%d committer: decide %d.%d", g, g, t); xdecide(g, k, res) };
		if
		:: res == R_OK -> atomic { printf("G%d commit %d.%d", g, g, t); commitB(k) }; pos = hi
		:: res == R_EPOCH -> SEEN(G_GEN_REFUSED); goto stop   /* ErrFenced: left prepared for the Restore */
		:: res == R_MARKED -> atomic { printf("G%d roll back %d.%d", g, g, t); rollbackB(k) }; goto stop
		fi
	od;
stop:
	skip
}

/* ---- at rest: once the last generation finished, every record landed
 * exactly once ---- */
active proctype Judge()
{
	byte r;
	timeout ->
	printf("-- at rest\n");
	if
	:: finished ->
		r = 0;
		do
		:: r < N -> assert(landed[r] == 1); r++
		:: else -> break
		od
	:: else
	fi
}

init
{
	atomic {
		run Gen(1);
		run Gen(2);
#if GENS > 2
		run Gen(3);
#endif
	}
}
#endif
