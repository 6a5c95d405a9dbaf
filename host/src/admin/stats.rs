//! `GET /v1/stats`: what became of each binding's deliveries since the node
//! started: delivered, failed attempts by class, filtered by its
//! transforms. (The same counters `/metrics` exports, per binding.)

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error_class::ErrorClass;
use crate::metrics::{DeliveryLabels, metrics};
use crate::node::Node;

#[derive(Debug, Serialize, ToSchema)]
pub struct Stats {
    pub bindings: Vec<BindingStats>,
}

/// One source's binding of one sink.
#[derive(Debug, Serialize, ToSchema)]
pub struct BindingStats {
    pub source: String,
    pub tenant: String,
    pub sink: String,
    /// Attempts that delivered.
    pub delivered: u64,
    /// Attempts that failed, by class (only classes seen).
    pub failed: BTreeMap<String, u64>,
    /// Hooks its transforms dropped (not delivered, not dead).
    pub filtered: u64,
}

/// Each loaded binding's outcomes since the node started.
#[utoipa::path(get, path = "/v1/stats", tag = "sinks",
    responses((status = 200, description = "Each binding's delivered, failed and filtered counts", body = Stats)))]
pub async fn get(State(node): State<Arc<Node>>) -> Json<Stats> {
    let m = metrics();
    let mut bindings = Vec::new();
    for (source, _) in node.sources.all() {
        for binding in &source.sinks {
            let sink = binding.sink.label().sink.clone();
            let attempts = |class: &'static str| {
                let labels = DeliveryLabels { source: source.name.clone(), sink: sink.clone(), class };
                m.deliveries.get(&labels).map_or(0, |counter| counter.get())
            };
            let failed = ErrorClass::ALL
                .into_iter()
                .map(|class| (class.as_str().to_string(), attempts(class.as_str())))
                .filter(|(_, n)| *n > 0)
                .collect();
            bindings.push(BindingStats {
                source: source.name.clone(),
                tenant: source.tenant.clone(),
                delivered: attempts("ok"),
                failed,
                filtered: m.filtered_of(&source.name, &sink),
                sink,
            });
        }
    }
    Json(Stats { bindings })
}
