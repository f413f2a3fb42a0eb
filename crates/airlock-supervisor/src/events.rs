//! The host's reader of a worker's events lane (ADR 0056).
//!
//! A pack's own threads send UI messages while no call runs: ComfyUI-Crystools' monitor sends
//! `crystools.monitor` every second from a thread it starts at import, and a preview encoder
//! may finish after its node returned. On the call lane nobody listens between calls, so the
//! worker sends those on a lane of their own, and a host thread reads it for as long as the
//! worker lives. Only UI messages travel here ([`UI_TOPICS`]); anything else is the peer's
//! fault and ends the worker, as on every lane.

use airlock_wire::{Message, Value};

use crate::error::LaneError;
use crate::lane::CallLane;

/// What a worker may send on its events lane: the server's UI messages.
pub const UI_TOPICS: &[&str] = &["send_sync", "progress_text"];

/// Reads `lane` until the worker is gone, handing each UI message to `deliver`; what the
/// worker held for it is released after it. Returns the refusal that ended it, if one did.
pub fn read_events(lane: &CallLane, mut deliver: impl FnMut(String, Value)) -> Option<LaneError> {
    loop {
        let refused = match lane.recv() {
            Ok(Some(Message::Event {
                id: 0,
                topic,
                payload,
            })) if UI_TOPICS.contains(&topic.as_str()) => {
                deliver(topic, payload);
                match lane.send_owed() {
                    Ok(()) => continue,
                    Err(_) => return None, // gone: the reaper reports it
                }
            }
            Ok(Some(Message::Event { id, topic, .. })) => {
                format!("an event {topic:?} for call {id} on the events lane")
            }
            Ok(Some(other)) => format!("unexpected {} on the events lane", other.kind()),
            Ok(None) | Err(_) => return None,
        };
        return Some(lane.refuse(LaneError::Protocol(refused)));
    }
}
