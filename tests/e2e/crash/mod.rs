//! Kill -9 durability: concurrent clients stream row writes, the server is SIGKILLed in the
//! middle of the stream, restarted, and every acknowledged write must be there, the journal must
//! agree with the index and the files, and the recovery must not invent hand edits
//! (`writes.rs`); kill -9 in the middle of each maintenance operation (`maintenance.rs`) and of
//! the semantic index's rebuild and catch-up (`semantic.rs`).

mod maintenance;
mod semantic;
mod writes;

use crate::engine::semantic::{
    NOTES, assert_consistent, bulk, bulk_long, ids, notes_table, search,
};
use crate::kit::*;
use datanotes::engine::files;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
