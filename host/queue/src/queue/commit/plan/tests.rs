use std::sync::Arc;

use super::*;
use crate::queue::reply::Reply;
use crate::store::{Durability, StoreOptions};

const NOW: u64 = 1_700_000_000_000;

/// A store, a tenant book and a ledger to plan against.
struct Bench {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    tenants: TenantBook,
    ledger: Ledger,
    limits: Limits,
}

impl Bench {
    fn new() -> Bench {
        let dir = tempfile::tempdir().expect("dir");
        let store = crate::store::open_embedded(&StoreOptions::new(dir.path())).expect("store");
        let tenants = TenantBook::load(store.as_ref()).expect("tenants");
        let limits = Limits {
            dedupe_ttl_ms: 1_000,
            dedupe_max_entries: None,
            dedupe_max_entries_per_tenant: None,
            tenants_max: None,
            intake_max_bytes: u64::MAX,
            archive: false,
        };
        Bench { _dir: dir, store, tenants, ledger: Ledger::new(0), limits }
    }

    fn planner(&mut self, logs_hooks: bool) -> Planner<'_> {
        Planner {
            store: self.store.as_ref(),
            limits: &self.limits,
            tenants: &self.tenants,
            ledger: &mut self.ledger,
            logs_hooks,
        }
    }

    /// Plan `calls` from seq 1, reading again what the window cannot vouch for.
    fn plan(&mut self, calls: &mut [Call], logs_hooks: bool) -> (Group, Replies) {
        let mut planner = self.planner(logs_hooks);
        let reread = planner.reread(calls).expect("reread");
        planner.plan(calls, &reread, 1, 1)
    }

    /// Plan and write `calls`, as a commit would.
    fn commit(&mut self, calls: &mut [Call]) -> Replies {
        let (mut group, replies) = self.plan(calls, false);
        group.seal_counters();
        self.store.write(&group.batch, Durability::Synced).expect("write");
        self.ledger.assume(&mut group, &self.tenants);
        replies
    }
}

fn hook(tenant: &str, key: Option<&str>) -> Prepared {
    let mut envelope = Envelope::new(format!("h-{key:?}"), "github".into(), tenant.into(), NOW, b"{}".to_vec());
    envelope.dedupe_key = key.map(str::to_string);
    Prepared {
        encoded: envelope.encode(),
        envelope,
        rows: Vec::new(),
        lines: Vec::new(),
        dedupe: key.map(str::to_string),
        prefetched: None,
        msg_id: None,
        logged: Logged::Not,
    }
}

fn call(kind: Kind, entries: Vec<Prepared>, prefetch_epoch: u64) -> Call {
    Call {
        kind,
        entries,
        extra: Batch::new(),
        deadline: None,
        now_ms: NOW,
        prefetch_epoch,
        reply: Reply::Each(Vec::new()),
    }
}

fn outcomes(replies: Replies) -> Vec<EntryOutcome> {
    replies.into_iter().flat_map(|reply| reply.expect("the call is planned")).collect()
}

fn seq(outcome: &EntryOutcome) -> u64 {
    match outcome {
        EntryOutcome::Committed(hook) => hook.seq,
        other => panic!("not committed: {other:?}"),
    }
}

#[test]
fn a_key_twice_in_one_group_is_one_hook_and_a_duplicate() {
    let mut bench = Bench::new();
    let mut calls = [call(Kind::Enqueue, vec![hook("t", Some("k")), hook("t", Some("k"))], 0)];
    let (group, replies) = bench.plan(&mut calls, false);
    let planned = outcomes(replies);
    assert_eq!(seq(&planned[0]), 1);
    assert!(matches!(&planned[1], EntryOutcome::Duplicate(original) if original.seq == 1), "{planned:?}");
    assert_eq!((group.hooks, group.next_seq, group.added_keys), (1, 2, 1));
}

#[test]
fn a_prefetch_stands_unless_a_commit_since_or_the_window_says_otherwise() {
    let mut bench = Bench::new();
    bench.commit(&mut [call(Kind::Enqueue, vec![hook("t", Some("k"))], 0)]);
    // A prefetch made before that commit (epoch 0) found nothing; the
    // window knows better.
    let (_, replies) = bench.plan(&mut [call(Kind::Enqueue, vec![hook("t", Some("k"))], 0)], false);
    assert!(matches!(outcomes(replies)[..], [EntryOutcome::Duplicate(_)]));
    // A prefetch made after it (epoch 1) is taken at its word: here it
    // says the key is absent, so the hook is taken.
    let (_, replies) = bench.plan(&mut [call(Kind::Enqueue, vec![hook("t", Some("k"))], 1)], false);
    assert!(matches!(outcomes(replies)[..], [EntryOutcome::Committed(_)]), "the prefetch stands");
    // Past the window (a reset), the key is read again from the store.
    bench.ledger.forget_prefetches();
    let (_, replies) = bench.plan(&mut [call(Kind::Enqueue, vec![hook("t", Some("k"))], 1)], false);
    assert!(matches!(outcomes(replies)[..], [EntryOutcome::Duplicate(_)]), "read again, it is there");
}

#[test]
fn quotas_refuse_new_keys_per_node_and_per_tenant() {
    let mut bench = Bench::new();
    bench.limits.dedupe_max_entries = Some(2);
    let entries = vec![hook("a", Some("1")), hook("b", Some("2")), hook("c", Some("3")), hook("c", None)];
    let (_, replies) = bench.plan(&mut [call(Kind::Enqueue, entries, 0)], false);
    let planned = outcomes(replies);
    assert!(matches!(planned[2], EntryOutcome::Refused(Refusal::DedupeQuota)), "{planned:?}");
    assert!(matches!(planned[3], EntryOutcome::Committed(_)), "a hook without a key is not counted");

    let mut bench = Bench::new();
    bench.limits.dedupe_max_entries_per_tenant = Some(1);
    bench.commit(&mut [call(Kind::Enqueue, vec![hook("a", Some("1"))], 0)]);
    let entries = vec![hook("a", Some("2")), hook("b", Some("3"))];
    let (_, replies) = bench.plan(&mut [call(Kind::Enqueue, entries, 1)], false);
    let planned = outcomes(replies);
    assert!(matches!(planned[0], EntryOutcome::Refused(Refusal::DedupeQuota)), "tenant a is full");
    assert!(matches!(planned[1], EntryOutcome::Committed(_)), "tenant b is not");
}

#[test]
fn a_release_refused_in_part_is_refused_whole_and_leaves_nothing_behind() {
    let mut bench = Bench::new();
    bench.limits.tenants_max = Some(1);
    let mut calls = [
        call(Kind::Enqueue, vec![hook("a", Some("1"))], 0),
        call(Kind::Release, vec![hook("a", Some("2")), hook("b", Some("3"))], 0),
        call(Kind::Enqueue, vec![hook("a", Some("4"))], 0),
    ];
    let (group, replies) = bench.plan(&mut calls, false);
    let mut replies = replies.into_iter();
    assert_eq!(seq(&replies.next().expect("first").expect("planned")[0]), 1);
    assert!(
        matches!(replies.next(), Some(Err(QueueError::Refused(Refusal::TenantLimit)))),
        "tenant b is over the limit, so the whole release is refused"
    );
    let last = replies.next().expect("third").expect("planned");
    assert_eq!(seq(&last[0]), 2, "the refused release took no seq");
    assert_eq!((group.hooks, group.added_keys, group.joining.len()), (2, 2, 1));
}

#[test]
fn a_key_expired_but_not_swept_is_taken_over_in_place() {
    let mut bench = Bench::new();
    bench.commit(&mut [call(Kind::Enqueue, vec![hook("t", Some("k"))], 0)]);
    let mut later = call(Kind::Enqueue, vec![hook("t", Some("k"))], 1);
    later.now_ms = NOW + bench.limits.dedupe_ttl_ms;
    bench.ledger.forget_prefetches();
    let (group, replies) = bench.plan(&mut [later], false);
    assert!(matches!(outcomes(replies)[..], [EntryOutcome::Committed(_)]));
    assert_eq!(group.added_keys, 0, "the store holds as many keys as before");
}

#[test]
fn logged_hooks_keep_their_seqs_and_only_new_ones_go_to_the_hook_log() {
    let mut bench = Bench::new();
    let mut logged = hook("t", Some("a"));
    logged.logged = Logged::Under(40);
    let mut resent = hook("t", Some("b"));
    resent.logged = Logged::Resend(41);
    let mut calls = [
        call(Kind::Settle, vec![logged, resent], 0),
        call(Kind::Enqueue, vec![hook("t", Some("c")), hook("t", None)], 0),
    ];
    let (group, replies) = bench.plan(&mut calls, true);
    let seqs: Vec<u64> = outcomes(replies).iter().map(seq).collect();
    assert_eq!(seqs, [40, 41, 42, 43], "new hooks take seqs past every logged one");
    let to_log: Vec<(u64, bool)> = group.to_log.iter().map(|r| (r.seq, r.msg_id.is_some())).collect();
    assert_eq!(to_log, [(41, false), (42, true), (43, false)], "the hook already logged is not sent again");
    let (group, _) = bench.plan(&mut [call(Kind::Enqueue, vec![hook("t", Some("d"))], 0)], false);
    assert!(group.to_log.is_empty(), "no hook log, nothing collected");
}
