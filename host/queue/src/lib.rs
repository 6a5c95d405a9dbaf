//! The [`queue`]: hooks and delivery rows, their stored forms and states,
//! the commit path, the DLQ and job records, over the storage of
//! `ankusa-store`. The edge and dispatch meet only here.

pub mod queue;

use ankusa_common::{digest, error_class, metrics, problem, settings};
use ankusa_store::{intake, records, store};
