//! Hooks for tests, with every field defaulted to something plausible.

use crate::Hook;

/// Builds a [`Hook`] for a test delivery.
#[derive(Clone, Debug)]
pub struct TestHook {
    hook: Hook,
}

impl Default for TestHook {
    fn default() -> Self {
        TestHook::new()
    }
}

impl TestHook {
    pub fn new() -> Self {
        let id = "0190c8e2-7b2a-7000-8000-000000000001".to_string();
        let mut test = TestHook {
            hook: Hook {
                idempotency_key: format!("{id}:0"),
                id,
                seq: 1,
                source: "test".into(),
                tenant: "default".into(),
                received_at: 1_700_000_000_000,
                content_type: Some("application/json".into()),
                headers: Vec::new(),
                body: Vec::new(),
                sha256: String::new(),
                dedupe_key: None,
                replay_id: None,
            },
        };
        test = test.body(br#"{"type":"test.event"}"#.to_vec());
        test
    }

    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.hook.id = id.into();
        self.hook.idempotency_key = format!("{}:0", self.hook.id);
        self
    }

    pub fn seq(mut self, seq: u64) -> Self {
        self.hook.seq = seq;
        self
    }

    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.hook.source = source.into();
        self
    }

    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.hook.tenant = tenant.into();
        self
    }

    pub fn received_at(mut self, unix_ms: u64) -> Self {
        self.hook.received_at = unix_ms;
        self
    }

    pub fn content_type(mut self, content_type: Option<&str>) -> Self {
        self.hook.content_type = content_type.map(str::to_string);
        self
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.hook.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body and its SHA-256.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.hook.body = body.into();
        self.hook.sha256 = crate::digest::sha256_hex(&self.hook.body);
        self
    }

    pub fn dedupe_key(mut self, key: Option<&str>) -> Self {
        self.hook.dedupe_key = key.map(str::to_string);
        self
    }

    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.hook.idempotency_key = key.into();
        self
    }

    pub fn replay_id(mut self, replay: Option<&str>) -> Self {
        self.hook.replay_id = replay.map(str::to_string);
        self
    }

    pub fn build(self) -> Hook {
        self.hook
    }
}

impl From<TestHook> for Hook {
    fn from(test: TestHook) -> Hook {
        test.build()
    }
}
