//! The message table: every module's messages with their ids, and the handlers of requests
//! and dumps. The core and each plugin add theirs at start-up; the server owns the result.
//!
//! Registration mistakes (a handler for a message whose module was not added, a name given
//! twice) are programming errors and panic at start-up, never at run time.

use crate::codec::{Encode, Reader, Writer};
use crate::{control, ApiError, Message, ModuleInfo, MsgKind, Retval};
use sluice_graph::Vlib;
use std::collections::{BTreeSet, HashMap};
use std::marker::PhantomData;

/// A request handler: the decoded request in, the reply (or an error) out.
pub type RequestFn<Q, R> = fn(&mut Vlib, &mut Ctx<'_>, Q) -> Result<R, ApiError>;

/// A dump handler: sends any number of details through the stream.
pub type DumpFn<Q, D> = fn(&mut Vlib, Q, &mut Stream<'_, '_, D>) -> Result<(), ApiError>;

/// An event source, called by the server on every service pass: looks for changes and sends
/// events to the clients that want them.
pub type PollFn = fn(&mut Vlib, &mut Events<'_>);

type Handler = Box<dyn Fn(&mut Vlib, &mut Ctx<'_>, &[u8]) -> Result<(), ApiError>>;

/// One message of the table.
pub struct Entry {
    /// Name.
    pub name: &'static str,
    /// CRC.
    pub crc: u32,
    /// Module it belongs to.
    pub module: &'static str,
    handler: Option<Handler>,
}

impl Entry {
    /// Whether clients may send it (a request or dump with a handler).
    pub fn is_request(&self) -> bool {
        self.handler.is_some()
    }
}

/// Per-event-name subscribers (session slots).
pub(crate) type Subs = HashMap<&'static str, BTreeSet<usize>>;

/// Appends a frame: length, id, context, body.
pub(crate) fn frame<M: Encode>(out: &mut Writer, id: u16, context: u32, m: &M) {
    let start = out.buf.len();
    out.bytes(&[0; 4]);
    id.encode(out);
    context.encode(out);
    m.encode(out);
    let len = (out.buf.len() - start - 4) as u32;
    out.buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// What a handler knows about the request it serves.
pub struct Ctx<'a> {
    /// The client's session slot.
    pub client: usize,
    pub(crate) context: u32,
    pub(crate) out: &'a mut Writer,
    pub(crate) subs: &'a mut Subs,
    pub(crate) ids: &'a HashMap<&'static str, u16>,
}

impl Ctx<'_> {
    /// Subscribes this client to event `E` (`on`), or unsubscribes it.
    pub fn subscribe<E: Message>(&mut self, on: bool) {
        let set = self.subs.entry(E::NAME).or_default();
        if on {
            set.insert(self.client);
        } else {
            set.remove(&self.client);
        }
    }

    fn id_of(&self, name: &'static str) -> u16 {
        self.ids
            .get(name)
            .copied()
            .unwrap_or(crate::NO_SUCH_MESSAGE)
    }
}

/// The details of one dump, written straight into the client's output.
pub struct Stream<'c, 'a, D> {
    ctx: &'c mut Ctx<'a>,
    id: u16,
    count: u32,
    _d: PhantomData<fn(D)>,
}

impl<D: Message> Stream<'_, '_, D> {
    /// Sends one record.
    #[inline]
    pub fn send(&mut self, d: &D) {
        frame(self.ctx.out, self.id, self.ctx.context, d);
        self.count += 1;
    }

    /// Records sent so far.
    pub fn count(&self) -> u32 {
        self.count
    }
}

/// Event output handed to pollers.
pub struct Events<'a> {
    pub(crate) subs: &'a Subs,
    pub(crate) ids: &'a HashMap<&'static str, u16>,
    pub(crate) outs: &'a mut dyn FnMut(usize, &[u8]),
    pub(crate) scratch: Writer,
}

impl Events<'_> {
    /// Whether any client subscribed to `E`.
    pub fn wanted<E: Message>(&self) -> bool {
        self.subs.get(E::NAME).is_some_and(|s| !s.is_empty())
    }

    /// Whether any client subscribed to any event.
    pub fn any_wanted(&self) -> bool {
        self.subs.values().any(|s| !s.is_empty())
    }

    /// Sends `e` (context 0) to every client subscribed to `E`.
    pub fn send<E: Message>(&mut self, e: &E) {
        let Some(set) = self.subs.get(E::NAME).filter(|s| !s.is_empty()) else {
            return;
        };
        let Some(&id) = self.ids.get(E::NAME) else {
            return;
        };
        self.scratch.buf.clear();
        frame(&mut self.scratch, id, 0, e);
        for &c in set {
            (self.outs)(c, &self.scratch.buf);
        }
    }
}

/// Every message the daemon speaks, with its handlers.
pub struct ApiRegistry {
    pub(crate) entries: Vec<Entry>,
    pub(crate) ids: HashMap<&'static str, u16>,
    pub(crate) modules: Vec<ModuleInfo>,
    pub(crate) pollers: Vec<PollFn>,
}

impl Default for ApiRegistry {
    fn default() -> Self {
        let mut r = ApiRegistry {
            entries: Vec::new(),
            ids: HashMap::new(),
            modules: Vec::new(),
            pollers: Vec::new(),
        };
        // The control messages take ids 0..3 in file order.
        r.module(&control::MODULE);
        r
    }
}

impl ApiRegistry {
    /// A table holding the control messages only.
    pub fn new() -> Self {
        ApiRegistry::default()
    }

    /// Adds a module's messages (ids in registration order). Panics if a message name is
    /// already taken.
    pub fn module(&mut self, m: &ModuleInfo) {
        assert!(
            !self.modules.iter().any(|x| x.name == m.name),
            "API module `{}' registered twice",
            m.name
        );
        for &(name, crc) in m.messages {
            let id = u16::try_from(self.entries.len()).expect("fewer than 65535 messages");
            assert!(
                self.ids.insert(name, id).is_none(),
                "API message `{name}' defined by two modules"
            );
            self.entries.push(Entry {
                name,
                crc,
                module: m.name,
                handler: None,
            });
        }
        self.modules.push(*m);
    }

    fn slot<M: Message>(&mut self) -> &mut Entry {
        let id = *self.ids.get(M::NAME).unwrap_or_else(|| {
            panic!(
                "API message `{}': register its module before its handler",
                M::NAME
            )
        });
        let e = &mut self.entries[id as usize];
        assert_eq!(e.crc, M::CRC, "API message `{}': CRC differs", M::NAME);
        assert!(
            e.handler.is_none(),
            "API message `{}' handled twice",
            M::NAME
        );
        e
    }

    /// Handles request `Q` with `f`, answering `R`.
    pub fn request<Q: Message + 'static, R: Message + 'static>(&mut self, f: RequestFn<Q, R>) {
        assert!(Q::KIND == MsgKind::Request && R::KIND == MsgKind::Reply);
        // The reply's id, known once its module is registered (looked up per request
        // otherwise): a name lookup per request is a tenth of a pipelined route add.
        let rid = self.ids.get(R::NAME).copied();
        self.slot::<Q>().handler = Some(Box::new(move |vm, ctx, body| {
            let q = decode::<Q>(body)?;
            let r = f(vm, ctx, q)?;
            let id = rid.unwrap_or_else(|| ctx.id_of(R::NAME));
            frame(ctx.out, id, ctx.context, &r);
            Ok(())
        }));
    }

    /// Handles dump `Q` with `f`, streaming `D` details and then `api_dump_end`.
    pub fn dump<Q: Message + 'static, D: Message + 'static>(&mut self, f: DumpFn<Q, D>) {
        assert!(Q::KIND == MsgKind::Dump && D::KIND == MsgKind::Details);
        self.slot::<Q>().handler = Some(Box::new(move |vm, ctx, body| {
            let q = decode::<Q>(body)?;
            let id = ctx.id_of(D::NAME);
            // Details of a failed dump are withdrawn: the client gets the error alone.
            let mark = ctx.out.buf.len();
            let mut s = Stream {
                ctx,
                id,
                count: 0,
                _d: PhantomData,
            };
            if let Err(e) = f(vm, q, &mut s) {
                s.ctx.out.buf.truncate(mark);
                return Err(e);
            }
            let count = s.count;
            let end = ctx.id_of(control::ApiDumpEnd::NAME);
            frame(ctx.out, end, ctx.context, &control::ApiDumpEnd { count });
            Ok(())
        }));
    }

    /// Adds an event source (see [`PollFn`]).
    pub fn poller(&mut self, f: PollFn) {
        self.pollers.push(f);
    }

    /// The modules, in registration order.
    pub fn modules(&self) -> &[ModuleInfo] {
        &self.modules
    }

    /// The message with id `id`.
    pub fn entry(&self, id: u16) -> Option<&Entry> {
        self.entries.get(id as usize)
    }

    /// The id of message `name`.
    pub fn id(&self, name: &str) -> Option<u16> {
        self.ids.get(name).copied()
    }

    /// Runs a request body through its handler outside any session (tests, benchmarks):
    /// the frames it produced (reply or details and end), or the error.
    pub fn call(&self, vm: &mut Vlib, id: u16, body: &[u8]) -> Result<Vec<u8>, ApiError> {
        let e = self.entries.get(id as usize).ok_or_else(|| {
            ApiError::new(Retval::UnknownMessage, format!("unknown message id {id}"))
        })?;
        let h = e.handler.as_ref().ok_or_else(|| {
            ApiError::new(
                Retval::NotARequest,
                format!("`{}' is not a request", e.name),
            )
        })?;
        let mut out = Writer::new();
        let mut subs = Subs::new();
        let mut ctx = Ctx {
            client: usize::MAX,
            context: 0,
            out: &mut out,
            subs: &mut subs,
            ids: &self.ids,
        };
        h(vm, &mut ctx, body).map_err(|err| with_name(err, e.name))?;
        Ok(out.buf)
    }

    pub(crate) fn handler(&self, id: u16) -> Option<&Handler> {
        self.entries.get(id as usize)?.handler.as_ref()
    }
}

/// Prefixes a decoding error with the message name.
pub(crate) fn with_name(e: ApiError, name: &str) -> ApiError {
    if e.retval == Retval::Malformed {
        ApiError::new(e.retval, format!("{name}: {}", e.message))
    } else {
        e
    }
}

/// Decodes a whole body as `M`.
pub fn decode<M: Message>(body: &[u8]) -> Result<M, ApiError> {
    let mut r = Reader::new(body);
    let m = M::decode(&mut r).map_err(|e| ApiError::new(Retval::Malformed, e.to_string()))?;
    r.finish()
        .map_err(|e| ApiError::new(Retval::Malformed, e.to_string()))?;
    Ok(m)
}
