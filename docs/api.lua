-- docs/api.lua - the public API of mongostore, described once: tools/docgen.lua
-- renders it into the pages docs/*.md and the LuaLS definitions types/, and
-- spec/01-unit/docs_spec.lua holds it against the modules themselves.
--
-- Shape. `pages` is a list of pages in the order of the index; each page has
-- sections, and each section a list of entries:
--   { fn = "connect", module = "mongostore", params = {...}, returns = {...},
--     fails = { codes... }, raises = "...", desc = "...", example = "..." }
--   { method = "commit", of = "mongostore.Store", ... }  (called with `:`)
--   { field = "null", module = "mongostore", type = "...", desc = "..." }
--   { class = "mongostore.ConnectOptions", desc = "...", fields = {...} }
--   { alias = "mongostore.Status", desc = "...", values = { { "\"PENDING\"", "..." } } }
-- A param or field is { name, type, desc, default = "..." }; a type is a
-- LuaLS type, and a trailing `?` makes the param optional. `returns` lists
-- what a call gives back when it succeeds; `fails` the codes of the
-- `nil, message, code` it gives back otherwise. Names starting with `_` are
-- private and never documented; `internal` lists the public-looking names
-- the modules have that are not part of the API, each with the reason.

local api = {}

-- The Lua name each module goes by in the pages (what the README calls it).
api.modules = {
  { name = "mongostore", as = "mongostore" },
  { name = "mongostore.core", as = "mongostore.core" },
  { name = "mongostore.values", as = "values" },
  { name = "mongostore.engine", as = "engine" },
  { name = "mongostore.chart", as = "chart" },
  { name = "mongostore.diagram", as = "diagram" },
  { name = "mongostore.ngx", as = "msngx" },
  { name = "mongostore.ngx_thread", as = "ngx_thread" },
  { name = "mongostore.model", as = "model" },
  { name = "mongostore.records", as = "records" },
  { name = "mongostore.stm", as = "stm" },
  { name = "mongostore.inbox", as = "inbox" },
  { name = "mongostore.webhook", as = "webhook" },
  { name = "mongostore.ngx_http", as = "ngx_http" },
  { name = "mongostore.ngx_access", as = "access" },
}

-- The receiver each class's methods are shown on (`store:commit(...)`).
api.receivers = {
  ["mongostore.Store"] = "store",
  ["mongostore.Engine"] = "engine",
  ["mongostore.Access"] = "access",
  ["mongostore.Chart"] = "c",
  ["mongostore.Database"] = "db",
  ["mongostore.Collection"] = "coll",
  ["mongostore.Cursor"] = "cursor",
  ["mongostore.Session"] = "s",
  ["mongostore.ObjectId"] = "oid",
  ["mongostore.Date"] = "d",
  ["mongostore.Binary"] = "bin",
  ["mongostore.Int32"] = "i32",
  ["mongostore.Timestamp"] = "ts",
  ["mongostore.Regex"] = "re",
  ["mongostore.Code"] = "code",
  ["mongostore.CodeWScope"] = "cws",
  ["mongostore.Symbol"] = "sym",
  ["mongostore.DBPointer"] = "ptr",
  ["mongostore.Model"] = "Article",
  ["mongostore.Document"] = "doc",
  ["mongostore.Query"] = "q",
  ["mongostore.Registry"] = "registry",
  ["mongostore.ModelSession"] = "ms",
  ["mongostore.Field"] = "Q.title",
  ["mongostore.RecordStore"] = "rs",
  ["mongostore.RecordQuery"] = "rq",
  ["mongostore.Searcher"] = "s",
  ["mongostore.SearchPath"] = "b.year",
  ["mongostore.SearchLength"] = "len",
  ["mongostore.SearchResults"] = "rows",
}

-- Names the modules expose that are not the public API.
api.internal = {
  ["mongostore.ngx_thread.CODECS"] = "shared with mongostore.ngx: the encodings of the values that cross the "
    .. "thread boundary (JSON for the store calls, BSON for msngx.run)",
  ["mongostore.chart.is_ancestor"] = "used by the interpreter: a path test on compiled charts",
  ["mongostore.Chart.node"] = "used by the interpreter: the compiled node at a path",
  ["mongostore.Engine.deliver"] = "the step under send and the relays: applies an event without checking it first",
  ["mongostore.Engine.deliver_many"] = "the step under send_many, the batched outbox pass and the sweep: deliver "
    .. "for a list, its commits in one bulk write",
  ["mongostore.Engine.relay_outbox_batch"] = "the batched form of relay_outbox, which calls it while batch_delivery "
    .. "is on",
  ["mongostore.Engine.create"] = "the step under start: no argument checks of its own",
  ["mongostore.Engine.definition_of"] = "the spawn relay's cache of a parent's chart id",
  ["mongostore.Engine.dead_letter"] = "the outbox relay giving up on an entry (see on_dead_letter)",
  ["mongostore.database.database"] = "the face's mongostore.database (documented there)",
  ["mongostore.database.sanitize"] = "the face's mongostore.sanitize (documented there)",
  ["mongostore.database.Database"] = "the method table of mongostore.Database, wrapped with the argument checks",
  ["mongostore.database.Collection"] = "the method table of mongostore.Collection, wrapped with the argument checks",
  ["mongostore.database.Cursor"] = "the method table of mongostore.Cursor",
  ["mongostore.transaction.run"] = "db:transaction itself (documented there)",
  ["mongostore.transaction.DEFAULT_TIMEOUT"] = "the default of db:transaction's opts.timeout, for the specs",
  ["mongostore.ngx_thread.store"] = "the thread side of the Store calls msngx forwards",
  ["mongostore.ngx_thread.engine"] = "the thread side of the Engine calls msngx forwards",
  ["mongostore.ngx_thread.run"] = "the thread side of msngx.run",
  ["mongostore.ngx_thread.worker_step"] = "the thread side of msngx.start_worker's steps",
  ["mongostore.ngx_thread.without_position"] = "shared with mongostore.ngx: a raised message without the "
    .. "file and line Lua put in front of it, for answers that may reach a client",
  ["mongostore.ngx_thread.external_claim"] = "the thread side of start_worker's on_external loop: its claims",
  ["mongostore.ngx_thread.external_renew"] = "the thread side of start_worker's on_external loop: its renewals",
  ["mongostore.ngx_thread.external_settle"] = "the thread side of start_worker's on_external loop: its settles",
  ["mongostore.RecordStore.load"] = "the step under fetch, history and the queries: stored documents as records, "
    .. "refs loaded",
  ["mongostore.RecordQuery.filter"] = "the filter a query sends (what its page tokens are bound to), for the specs",
}

-- The codes of `nil, message, code`, in mongostore.codes order.
api.codes = {
  { "conflict",
    "The version check lost: someone else advanced the execution since it was loaded (or, for a first "
    .. "commit, an execution with that id exists). Nothing of the call was written. `store:commit` gives "
    .. "the version it found in the detail, the fourth value: `detail.found` (nil: no document).",
    "Reload and apply the event again (the engine does this by itself, up to `max_conflicts` times). "
    .. "From `engine:start`: the id holds an execution of another chart." },
  { "duplicate",
    "A unique key exists already (server code 11000; the document API names the key in the message), or "
    .. "the commit's `processed_event_id` is marked on the execution: the event was applied before. Nothing "
    .. "was written.",
    "Treat it as done. `engine:send` answers `true, \"duplicate\"` rather than this code. For a document, "
    .. "read the one that holds the key, or write under another." },
  { "network",
    "The connection broke, was reset or was refused while the call was under way.",
    "For a read, call again. For a write, it may or may not have been applied: repeat it with the same "
    .. "event id, and dedupe refuses the copy if the first attempt landed." },
  { "timeout",
    "The server did not answer within `socketTimeoutMS` (from the URI; 30 s when the URI does not say), or "
    .. "it gave up itself (MaxTimeMSExpired); from `db:transaction`, the transaction gave up retrying after "
    .. "`opts.timeout` seconds (`detail.cause` holds the last failure's code).",
    "As for `network`: the write may have been applied; repeat it with the same event id." },
  { "server",
    "The server refused the operation (its code is in the message, and in `detail.server_code` from the "
    .. "document API), or a stored document could not be read back.",
    "Log it; retrying the same call gives the same answer until what the server objects to changes." },
  { "invalid",
    "A value that cannot be stored or used (an empty or non-UTF-8 id, data the value rules refuse, an "
    .. "option out of range, a cursor this store did not issue for the query, a kind a chart does not "
    .. "take, a collection name MongoDB does not take, a closed session or one of another database handle "
    .. "as `opts.session`, a transaction call in the wrong state, an `fn` of `db:transaction` that raised). "
    .. "Checked before anything is sent: nothing was written.",
    "Fix the input; the same call fails the same way every time." },
  { "too_large",
    "The document or event would exceed the server's maximum size (or the engine's `max_event_bytes`). "
    .. "Nothing was written.",
    "Send less: keep big payloads elsewhere and pass a reference." },
  { "unavailable",
    "No server could be selected (down, or still starting), the server has no sessions or transactions "
    .. "(a standalone: `db:session`, `db:transaction`), or (OpenResty) no worker thread was free to take "
    .. "the call.",
    "Retry later; the client pool reconnects in the background, so the next call may succeed." },
  { "closed",
    "The store was closed with `store:close()`; or the database (`db:close()`), the cursor or the session "
    .. "the call went through was closed.",
    "Connect (or open the database) again; a closed handle stays closed." },
  { "not_found",
    "(engine, msngx) The execution an event was sent to does not exist.",
    "Start it first, or check the id. The outbox relay retries such entries up to `max_attempts` "
    .. "times, since a forked child may not be created yet." },
  { "transient",
    "(document API) The server labelled the error TransientTransactionError: an operation inside a "
    .. "transaction, or its commit, failed in a way that running the whole transaction again may cure (a "
    .. "write conflict with another transaction, an election). The transaction is over.",
    "`db:transaction` runs `fn` again by itself. A transaction run by hand (`db:session()`): abort it and "
    .. "run it again from `s:start_transaction()`." },
  { "stale",
    "(models) The document moved on since this copy was read: its revision in the database is not the "
    .. "copy's (`detail.found` is the stored one). Nothing was written and the copy is as it was. (inbox) A "
    .. "commit made under an inbox claim "
    .. "(`fence`) after the claim passed to another worker, whose commit under a higher fence landed first.",
    "`doc:reload()` and apply the change again, or use an atomic update (`Model:update`). An inbox worker "
    .. "drops what it held of that execution: the worker holding the claim now delivers it." },
  { "validation",
    "(models) A value does not fit its field's declaration; `detail.errors` lists `{ field, message }`. "
    .. "Nothing was sent.",
    "Fix the value; a programming mistake (an unknown or immutable field) raises instead." },
  { "transaction",
    "(models) `registry:transaction` was called inside a running one on the same registry: MongoDB has "
    .. "no nested transactions.",
    "Pass the outer session to the code that needs it, or ask for `{ independent = true }`." },
  { "clock_regression",
    "(records) The clock went back further than the store's grace allows since the latest store "
    .. "timestamp this process saw (or read at open). Nothing was written.",
    "Fix the clock; `clock_regression_grace` and `allow_clock_regression` on `records.open` relax the "
    .. "guard." },
  { "finished",
    "(engine, msngx) A control call (`cancel`, `terminate`, `suspend`, `resume`) reached an execution that "
    .. "has ended (`DONE`, `CANCELLED` or `FAILED`, named in the message). Nothing was written.",
    "Nothing to do: the execution is over. The OpenResty example answers 409." },
}

local WRITE_FAILS = { "network", "timeout", "unavailable", "server", "closed" }

-- The failing codes of a call: its own, then the ones every server call has.
local function fails(...)
  local out = { ... }
  for _, c in ipairs(WRITE_FAILS) do out[#out + 1] = c end
  return out
end

api.pages = {}

------------------------------------------------------------------------
-- store

api.pages[#api.pages + 1] = {
  file = "store",
  title = "The store",
  module = "mongostore",
  summary = "`mongostore.connect` and the Store: commits, loads, listing, the outbox and spawn relays' "
    .. "claims, timers, the trace; Executions and Events.",
  intro = [[
`local mongostore = require "mongostore"`. A Store is one connection to one
database: `mongostore.connect(uri, opts)` pings the server (retrying for up to
`opts.wait` seconds) and makes the indexes. Every call that talks to the server
returns `nil, message, code` when it fails ([errors](errors.md)) and raises only
on a programming mistake: a wrong Lua type, an unknown option, naming the
function and the argument (`delete_timer: path must be a string, got number`).
A string of the right type that cannot serve as an id, a path or a filter
(empty, not UTF-8, a NUL inside, longer than 16 KiB) is a bad value:
`nil, msg, "invalid"`, and nothing is written.]],
  sections = {
    {
      title = "Connecting",
      entries = {
        { fn = "connect", module = "mongostore",
          params = {
            { "uri", "string", "a MongoDB URI; `socketTimeoutMS`, `serverSelectionTimeoutMS` and `maxPoolSize` "
              .. "in it are honoured" },
            { "opts", "mongostore.ConnectOptions?", "the database, prefix and windows" },
          },
          returns = { { "store", "mongostore.Store", "connected, with its indexes made" } },
          fails = { "invalid", "unavailable", "network", "timeout", "server" },
          raises = "a wrong type for `uri` or `opts`, or an unknown option",
          desc = [[
Pings until the server answers or `opts.wait` seconds have passed, so a worker
started beside its server waits for it. One libmongoc client pool is kept per
process and URI and shared by every store on it; each store holds one client.
A bad option value or a malformed URI is `invalid` (the message never quotes
the URI's password).]],
          example = [[
local store = assert(mongostore.connect("mongodb://127.0.0.1:27017",
                                        { db = "harel", trace_max = 200, wait = 30 }))]] },
        { class = "mongostore.ConnectOptions",
          desc = "The options of `mongostore.connect`; an unknown key raises.",
          fields = {
            { "db", "string?", "database name (letters, digits, `_` and `-`)", default = "\"harel\"" },
            { "prefix", "string?", "collections are `<prefix>_executions` and `<prefix>_counters` "
              .. "(`prefix = \"harel\"` is where harel's own MongoStore keeps them); without it, "
              .. "`executions` and `counters`", default = "none" },
            { "trace_max", "integer?", "the trace ring keeps the last N steps (0 keeps all)", default = "200" },
            { "wait", "number?", "seconds to keep retrying the first ping (0 to 86400)", default = "30" },
            { "dedupe_window", "integer?", "how many handled event ids each execution keeps for dedupe "
              .. "(1 to 1,000,000)", default = "1000" },
            { "seq_block", "integer?", "outbox and spawn seqs reserved per counter round trip (1 to "
              .. "1,000,000); 1 reserves them at every emitting commit, as harel does", default = "1000" },
          } },
      },
    },
    {
      title = "Executions and events",
      entries = {
        { fn = "execution", module = "mongostore",
          params = { { "t", "mongostore.ExecutionFields", "harel's Execution fields; `definition_id` is required" } },
          returns = { { "exe", "mongostore.Execution", "at version 0, not stored yet" } },
          raises = "a field that does not exist, a wrong type or value for one, or no `definition_id`",
          desc = [[
Builds an Execution. `id` defaults to a fresh `mongostore.uuid()`, `status` to
`PENDING`, `root_path` to `""`, `priority` to 0 and the tables to empty ones.
The stored data is harel's JSON, so harel's MongoStore reads what mongostore
writes and the other way round.]],
          example = [[
local exe = mongostore.execution{ definition_id = "order", context = { total = 42 } }
assert(store:save(exe))   -- inserts; exe.version 0 -> 1]] },
        { fn = "is_execution", module = "mongostore",
          params = { { "v", "any", "any value" } },
          returns = { { "yes", "boolean", "whether `v` is an Execution" } } },
        { class = "mongostore.ExecutionFields",
          desc = "What `mongostore.execution{...}` takes: harel's Execution fields, every one optional but "
            .. "`definition_id`.",
          fields = {
            { "id", "string?", "the execution's id", default = "`mongostore.uuid()`" },
            { "definition_id", "string", "the chart's id" },
            { "definition_fqn", "string?", "harel's fully qualified chart name" },
            { "root_path", "string?", "the region a forked child runs (`\"\"` for a root)", default = "\"\"" },
            { "status", "mongostore.Status?", "the life-cycle status", default = "\"PENDING\"" },
            { "outcome", "string?", "the final state's outcome once finished" },
            { "error", "string?", "`\"<type>: <message>\"` of the action that failed it" },
            { "active_path", "string?", "the dotted path of the active leaf" },
            { "history", "table<string, string>?", "remembered children of composites (deep history)" },
            { "context", "table<string, any>?", "the execution's data, under the value rules", default = "{}" },
            { "processed_events", "integer?", "how many events it has handled", default = "0" },
            { "priority", "integer?", "0 to 4", default = "0" },
            { "parent_id", "string?", "the parent of a forked child" },
            { "child_id", "string?", "a forked child's own id in its parent" },
            { "deferred", "mongostore.Event[]?", "events held by `defer` or while suspended",
              default = "an empty array" },
            { "children", "table<string, table>?", "the forked children by region" },
            { "invoke_seq", "table<string, integer>?", "harel's invoke counters" },
            { "created_at", "number?", "epoch seconds" },
            { "updated_at", "number?", "epoch seconds" },
            { "finished_at", "number?", "epoch seconds" },
            { "expires_at", "number?", "epoch seconds" },
          } },
        { class = "mongostore.Execution", parent = "mongostore.ExecutionFields",
          desc = [[
An execution: its fields read and write like a table's, but `id`,
`definition_id` and `version` are read-only, and assigning a wrong type or an
unknown field raises. `pairs` lists its fields on Lua 5.4 (LuaJIT has no
`__pairs`).]],
          fields = {
            { "id", "string", "the execution's id (read-only)" },
            { "version", "integer", "0 until stored; each commit adds one (read-only)" },
            { "status", "mongostore.Status", "the life-cycle status" },
          } },
        { alias = "mongostore.Status",
          desc = "An execution's status.",
          values = {
            { "\"PENDING\"", "created, Start not applied yet" },
            { "\"RUNNING\"", "running" },
            { "\"DONE\"", "finished in a final state (see `outcome`)" },
            { "\"CANCELLED\"", "cancelled" },
            { "\"SUSPENDED\"", "suspended: events that arrive are held in order until resumed" },
            { "\"CANCELLING\"", "a cooperative cancel is under way" },
            { "\"FAILED\"", "an action raised (see `error`)" },
          } },
        { class = "mongostore.Event",
          desc = [[
An event. A missing `id` is filled in (in the caller's table) with
`mongostore.uuid()`; times are epoch seconds in Lua and ISO-8601 strings in
the stored JSON.]],
          fields = {
            { "id", "string?", "the event id that dedupe keys on", default = "`mongostore.uuid()`" },
            { "kind", "string", "the event kind (`PlaceOrder`, `Timeout`, ...)" },
            { "data", "table<string, any>?", "the payload, under the value rules", default = "{}" },
            { "created_time", "number?", "epoch seconds", default = "now" },
            { "received_time", "number?", "epoch seconds, set when the engine takes it" },
          } },
      },
    },
    {
      title = "Committing",
      entries = {
        { method = "commit", of = "mongostore.Store",
          params = {
            { "exe", "mongostore.Execution", "the execution at the version it was loaded (or created) at" },
            { "opts", "mongostore.CommitOptions?", "what else the commit carries" },
          },
          returns = { { "ok", "true", "committed: `exe.version` is one higher" } },
          fails = fails("conflict", "duplicate", "stale", "invalid", "too_large"),
          fails_extra = { { "detail", "{ found: integer? }?", "with `conflict`: `found`, the version found (nil: "
                            .. "no document)" } },
          raises = "an `exe` that is not an Execution, an `opts` that is not a table, or an unknown option",
          desc = [[
One atomic single-document write guarded by the version check: the new state,
the emitted events (the outbox), the forked children (spawns), the timer
changes, the event's dedupe mark and a trace step, all or nothing. On any
failure `exe.version` stays where it was and nothing is written (an outbox,
spawn or trace seq may be skipped: seqs are unique, not gapless). The event is
checked against the dedupe marks that came with the load, so a redelivered
event is refused with `duplicate` before anything is sent.]],
          example = [[
local ok, err, code, detail = store:commit(exe, {
  emits = { { target_id = "payments", event = { kind = "Charge", data = { amount = 42 } } } },
  processed_event_id = "evt-1",
  timers = { { action = "schedule", path = "AwaitingPayment", fire_at = mongostore.now() + 900 } },
})
if not ok and code == "conflict" then --[=[ reload and apply the event again ]=] end]] },
        { method = "save", of = "mongostore.Store",
          params = { { "exe", "mongostore.Execution", "the execution" } },
          returns = { { "ok", "true", "stored: `exe.version` is one higher" } },
          fails = fails("conflict", "invalid", "too_large"),
          fails_extra = { { "detail", "{ found: integer? }?", "with `conflict`: `found`, the version found" } },
          raises = "an `exe` that is not an Execution",
          desc = "A commit with nothing else: inserts a new execution (version 0 -> 1) or writes its fields." },
        { method = "commit_many", of = "mongostore.Store",
          params = {
            { "items", "{ [1]: mongostore.Execution, [2]: mongostore.CommitOptions? }[]",
              "commits of executions loaded before, each as `commit` takes it" },
          },
          returns = { { "results", "mongostore.BatchResult[]", "one per item, in order" } },
          raises = "an `items` that is not a list, an item that is not { Execution, opts }, or an unknown option",
          desc = [[
Many commits in one unordered bulk write: each stays the single-document update
guarded by its version and its dedupe mark, atomic on its own, so one that
loses (`conflict`, `duplicate`) leaves the others landed. The seqs of every
emit and spawn of the batch are taken at once. A committed item's
`exe.version` is one higher; a failed one's is unchanged. A version-0 item (a
new execution) is committed alone, as `commit` does. When the server answers
for fewer documents than it was sent, one find tells the items apart.]] },
        { class = "mongostore.BatchResult",
          desc = "The outcome of one item of `commit_many`: `{ ok = true }`, or the item's failure in the shape "
            .. "every batch call gives (`index`, `message`, `code`, `detail`).",
          fields = {
            { "ok", "true?", "committed" },
            { "index", "integer?", "not committed: the item's index in `items`" },
            { "message", "string?", "why not" },
            { "code", "string?", "the code of `message` (`conflict`, `duplicate`, `network`, ...)" },
            { "detail", "{ found: integer? }?", "with `conflict`: `found`, the version found" },
          } },
        { class = "mongostore.CommitOptions",
          desc = "What a commit carries besides the execution; an unknown key raises.",
          fields = {
            { "emits", "mongostore.Emit[]?", "events queued in this commit's outbox" },
            { "processed_event_id", "string?", "the event this commit applies: marked handled, and the commit "
              .. "is refused with `duplicate` when it is marked already" },
            { "processed_event_ids", "string[]?", "a group commit's events (at most 256, distinct, in the order "
              .. "applied; exclusive with `processed_event_id`): all are marked in the one update or none is, "
              .. "and `duplicate` means one of them was marked already" },
            { "advance", "integer?", "how far the version moves on (1 to 256; a group commit of n events: n, "
              .. "as n commits would, so the ids its events derive from the version stay unique)",
              default = "1" },
            { "timers", "mongostore.TimerChange[]?", "durable timers armed or cancelled" },
            { "spawns", "mongostore.Spawn[]?", "children to fork (created by the spawn relay)" },
            { "trace", "mongostore.TraceStep|mongostore.TraceStep[]?", "a step for the trace ring (a group "
              .. "commit: a list of steps, one per event, indexed in order)" },
            { "fence", "integer?", "the inbox claim's fence the commit is made under (`mongostore.inbox`): the "
              .. "commit lands only while no commit under a higher fence has (else `stale`), and stores it as "
              .. "the execution's `inbox_fence`" },
            { "next_fire_at", "number?", "the earliest timer armed once the commit is applied (`math.huge`: none), "
              .. "from a caller that read every armed timer at this version (the sweep, through `load_many`'s "
              .. "`timers`): the sweep's mark is set to it, where a commit otherwise only lowers it for what it "
              .. "schedules; not a number: `invalid`" },
          } },
        { class = "mongostore.Emit",
          desc = "An event queued in the outbox.",
          fields = {
            { "target_id", "string?", "the execution it goes to; nil: an external event (the engine's `on_external`)" },
            { "event", "mongostore.Event", "the event" },
          } },
        { class = "mongostore.TimerChange",
          desc = "A durable timer armed or cancelled by a commit; a path may not be both in one commit.",
          fields = {
            { "action", "\"schedule\"|\"cancel\"", "arm (or re-arm) it, or disarm it" },
            { "path", "string", "the state path the timer belongs to" },
            { "fire_at", "number?", "epoch seconds (finite); required to schedule" },
          } },
        { class = "mongostore.Spawn",
          desc = "A child execution to fork.",
          fields = {
            { "child_id", "string", "the child's id" },
            { "root_path", "string", "the region it runs" },
            { "context", "table<string, any>?", "its starting context" },
          } },
        { class = "mongostore.TraceStep",
          desc = "One step of the trace ring (the engine writes these with `trace = true`); any other "
            .. "storable keys are kept too.",
          fields = {
            { "event", "string?", "the event kind" },
            { "event_id", "string?", "the event id" },
            { "from", "string?", "the active path before" },
            { "to", "string?", "the active path after" },
            { "outcome", "string?", "what the event did (`DeliveryResult.outcome`): `ignored` tells an event "
              .. "that changed nothing from a self-transition (`transition`)" },
            { "status", "mongostore.Status?", "the status after" },
            { "at", "number?", "epoch seconds" },
            { "actions", "string[]?", "the hooks that ran" },
            { "error", "string?", "the failure, if an action raised" },
            { "index", "integer?", "the step's index (0 to 2^53); given by the store when absent" },
          } },
      },
    },
    {
      title = "Loading",
      entries = {
        { method = "load", of = "mongostore.Store",
          params = {
            { "id", "string", "the execution id" },
            { "timer_path", "string?", "a state path whose armed timer to report" },
          },
          returns = {
            { "exe", "mongostore.Execution?", "the execution; nil (and nothing else) when there is none" },
            { "armed", "number?", "with `timer_path`: the fire_at armed for it now (nil when none)" },
          },
          fails = fails("invalid"),
          raises = "an `id` or `timer_path` that is not a string",
          desc = "One find by `_id`. The execution comes with its dedupe marks, which its next commit checks." },
        { method = "load_many", of = "mongostore.Store",
          params = {
            { "ids", "string[]", "execution ids" },
            { "opts", "{ timers: boolean? }?", "`timers = true`: also answer each execution's armed timers" },
          },
          returns = {
            { "exes", "table<string, mongostore.Execution>", "by id; an id with no execution has no entry" },
            { "armed", "table<string, table<string, number>>?", "with `timers`: by id, each armed timer's "
              .. "fire_at by its state path (empty when none is armed)" },
          },
          fails = fails("server"),
          raises = "an `ids` that is not a list of strings, an unknown option or a `timers` that is not a boolean",
          desc = "One find with `$in` for every id; each execution comes with its dedupe marks, as `load` gives, "
            .. "and with `timers` its armed timers in the same round trip (the sweep's check that a Timeout's "
            .. "timer is still armed with its fire_at, as `load`'s `timer_path` gives it for one)." },
        { method = "load_for_event", of = "mongostore.Store",
          params = {
            { "id", "string", "the execution id" },
            { "event_id", "string", "the event about to be applied" },
            { "timer_path", "string?", "a state path whose armed timer to report" },
          },
          returns = {
            { "exe", "mongostore.Execution?", "the execution; nil when there is none (then `processed` is false)" },
            { "processed", "boolean", "whether `event_id` is handled already" },
            { "armed", "number?", "with `timer_path`: the fire_at armed for it now" },
          },
          fails = fails("invalid"),
          raises = "an argument that is not a string",
          desc = "One round trip: the execution, whether the event is handled already, and the armed timer." },
        { method = "is_processed", of = "mongostore.Store",
          params = {
            { "id", "string", "the execution id" },
            { "event_id", "string", "the event id" },
          },
          returns = { { "processed", "boolean",
                        "whether the execution has handled `event_id` (within the dedupe window)" } },
          fails = fails("invalid"),
          raises = "an argument that is not a string",
          desc = "Looks among the digests, then in `processed` (harel's marks, or ours before the digests)." },
      },
    },
    {
      title = "Listing",
      entries = {
        { method = "list_executions", of = "mongostore.Store",
          params = { { "q", "mongostore.ListQuery?", "the filters and the page" } },
          returns = { { "page", "mongostore.Page", "one page of summaries" } },
          fails = fails("invalid"),
          raises = "a wrong type for a filter, or an unknown filter",
          desc = [[
Pages through executions by `_id`, filtered on the server (the index on
`definition_id, status, _id`). Pass `page.next_cursor` back, with the same
filters, until it is nil. A cursor is signed (HMAC-SHA256) with a secret kept
once per database, over the last `_id` and the filters: any store on the same
database honours it, and one that was altered, forged, or issued for other
filters is refused with `invalid`. A `status` that is not one of the seven is
`invalid` too. On a store with a `prefix`, with a `status` filter, the promoted status of the documents
harel's own store committed last is brought up to date first (as `due_timers`
does: one find more), so they are listed under the status harel committed.]],
          example = [[
local page = store:list_executions{ definition_id = "order", status = { "RUNNING" }, limit = 50 }
while page do
  for _, s in ipairs(page.items) do print(s.id, s.status) end
  page = page.next_cursor and store:list_executions{ definition_id = "order", status = { "RUNNING" },
                                                     limit = 50, cursor = page.next_cursor }
end]] },
        { class = "mongostore.ListQuery",
          desc = "The filters of `store:list_executions`; an unknown key raises.",
          fields = {
            { "status", "mongostore.Status|mongostore.Status[]?", "one status or a list of them" },
            { "definition_id", "string?", "only this chart's executions" },
            { "roots_only", "boolean?", "leave out forked children" },
            { "limit", "integer?", "page size, 1 to 10000 (may change between pages)", default = "100" },
            { "cursor", "string?", "`next_cursor` of the page before" },
          } },
        { class = "mongostore.Page",
          desc = "A page of the listing.",
          fields = {
            { "items", "mongostore.Summary[]", "the executions of this page, by `_id`" },
            { "next_cursor", "string?", "where the next page starts; nil on the last page" },
          } },
        { class = "mongostore.Summary",
          desc = "An execution as the listing shows it: no context, history or children.",
          fields = {
            { "id", "string", "" },
            { "definition_id", "string", "" },
            { "status", "mongostore.Status", "" },
            { "outcome", "string?", "" },
            { "active_path", "string?", "" },
            { "version", "integer", "" },
            { "parent_id", "string?", "" },
            { "finished_at", "number?", "epoch seconds" },
          } },
      },
    },
    {
      title = "Outbox and spawns",
      intro = [[
Without a limit, `pending_outbox()` and `pending_spawns()` list every pending
entry (inspection), each with its `source_id`. With `{ limit = n }` they claim whole
source documents (so one relay delivers one execution's entries, in order)
until the caller holds at least `limit`, in three round trips however many
documents that takes (a find of candidates, one update that stamps them, one
find of what it stamped; one findAndModify for a single candidate): each
entry carries a `token` and its
`source_id`, no other relay gets them until the lease runs out, `ack_*(seq,
token)` removes an entry only while the claim is still the caller's, and
`release_*(source_id, token)` gives the rest back early. Dedupe stays the
safety net.]],
      entries = {
        { method = "pending_outbox", of = "mongostore.Store",
          params = {
            { "opts", "mongostore.ClaimOptions?", "without a limit: list every entry, unclaimed" },
          },
          returns = { { "entries", "mongostore.OutboxEntry[]", "oldest first (by seq)" } },
          fails = fails("invalid"),
          raises = "a wrong type for an option, an unknown option, a lease (or `targeted`, `external`) without a "
            .. "limit, or both `targeted` and `external`" },
        { class = "mongostore.ClaimOptions",
          desc = "A claim of `pending_outbox` (all of these) or `pending_spawns` (`limit`, `lease`); an unknown "
            .. "key raises.",
          fields = {
            { "limit", "integer?", "claim at least this many entries (>= 1)" },
            { "lease", "number?", "seconds the claim holds (> 0, at most a day); needs a limit", default = "30" },
            { "targeted", "boolean?", "claim only entries with a target (a relay with no handler for external "
              .. "events); `entries.external_left` counts the external entries the claim saw and left pending" },
            { "external", "boolean?", "the opposite: only entries without a target whose `retry_at` has come "
              .. "(`engine:claim_external`); not with `targeted`" },
          } },
        { method = "ack_outbox", of = "mongostore.Store",
          params = {
            { "seq", "integer", "the entry's seq" },
            { "token", "string?", "the claim's token: remove the entry only while the claim is still the caller's" },
          },
          returns = { { "ok", "true", "the entry is gone (or was gone already)" } },
          fails = fails("invalid"),
          raises = "a wrong type for `seq` or `token`" },
        { method = "ack_outbox_many", of = "mongostore.Store",
          params = {
            { "acks", "mongostore.OutboxAck[]", "per source document, the seqs delivered under its claim" },
          },
          returns = { { "ok", "true", "every update was applied (an ack whose claim passed on does nothing)" } },
          fails = fails("invalid"),
          raises = "an `acks` that is not a list of acks",
          desc = [[
The acks of a relay pass in one unordered bulk write: one update per source
document pulls its listed seqs while the document is still claimed by the
token, and with `release` also gives the claim back.]] },
        { class = "mongostore.OutboxAck",
          desc = "One source document's part of `ack_outbox_many`.",
          fields = {
            { "source_id", "string", "the document the entries were claimed from" },
            { "token", "string", "the claim's token" },
            { "seqs", "integer[]", "the delivered entries" },
            { "release", "boolean?", "also end the claim (nothing of it is left to deliver)", default = "false" },
          } },
        { method = "release_outbox", of = "mongostore.Store",
          params = {
            { "source_id", "string", "the document the entries were claimed from" },
            { "token", "string", "the claim's token" },
          },
          returns = { { "ok", "true", "the rest of the claim is given back" } },
          fails = fails("invalid"),
          raises = "a wrong type for an argument",
          desc = "Ends a claim before its lease (a relay done with it, or unable to deliver yet)." },
        { method = "fail_outbox", of = "mongostore.Store",
          params = {
            { "entry", "mongostore.OutboxEntry", "a claimed entry (with its `token`)" },
            { "opts", "{ error: string?, attempts: integer? }?", "why it was given up (default \"given up\") "
              .. "and the tries it had (>= 0, default 0)" },
          },
          returns = { { "ok", "true", "moved to `outbox_failed` (or no longer the caller's to move)" } },
          fails = fails("invalid"),
          raises = "an entry without an integer `seq`, a `token` or an `event`",
          desc = [[
Keeps an entry given up on: one update pulls it from the source document's
outbox and pushes it, with its error, when and its tries, onto
`outbox_failed`, only while the claim is still the caller's. The engine does
this for a dead letter when it has no `on_dead_letter`.]] },
        { method = "failed_outbox", of = "mongostore.Store",
          params = { { "opts", "{ limit: integer? }?", "entries at most (>= 1, default 1000)" } },
          returns = { { "entries", "mongostore.FailedEntry[]", "oldest failure first" } },
          fails = fails("invalid"),
          desc = "The entries given up on, for an operator (`mongostore outbox --failed`): a scan of the "
            .. "documents that hold some, not a worker's path." },
        { method = "redeliver_failed", of = "mongostore.Store",
          params = { { "source_id", "string", "the execution that emitted it" },
                     { "seq", "integer", "the entry's seq" } },
          returns = { { "ok", "true", "" }, { "moved", "boolean", "false: no such failed entry" } },
          fails = fails("invalid"),
          raises = "a wrong type for an argument",
          desc = "Puts a failed entry back into its source's outbox with its seq (`mongostore outbox "
            .. "--redeliver SOURCE:SEQ`); the relays deliver it on their next pass, and dedupe refuses a copy "
            .. "already applied." },
        { class = "mongostore.FailedEntry",
          desc = "An outbox entry given up on, as `failed_outbox` lists it.",
          fields = {
            { "source_id", "string", "the execution that emitted it" },
            { "seq", "integer", "its seq" },
            { "target_id", "string?", "nil: an external event" },
            { "event", "mongostore.Event", "the event" },
            { "error", "string", "why it was given up" },
            { "failed_at", "number", "epoch seconds" },
            { "attempts", "integer", "the tries it had" },
          } },
        { method = "renew_outbox", of = "mongostore.Store",
          params = {
            { "source_id", "string", "the document the entries were claimed from" },
            { "token", "string", "the claim's token" },
            { "lease", "number", "seconds from now the claim holds (> 0, at most a day)" },
          },
          returns = {
            { "renewed", "boolean", "false: the claim is no longer the caller's (its lease ran out and another "
              .. "relay took the document)" },
            { "until", "number?", "epoch seconds the claim now holds until" },
          },
          fails = fails("invalid"),
          raises = "a wrong type for an argument",
          desc = "Extends a held claim while a handler still runs on its entries (`engine:renew_external`)." },
        { method = "retry_outbox", of = "mongostore.Store",
          params = {
            { "source_id", "string", "the document the entry was claimed from" },
            { "token", "string", "the claim's token" },
            { "seq", "integer", "the entry" },
            { "retry_at", "number", "epoch seconds before which `pending_outbox(..., { external = true })` "
              .. "leaves it" },
            { "tries", "integer", "the tries it has had" },
            { "release", "boolean?", "also end the claim", default = "false" },
          },
          returns = { { "held", "boolean", "false: the claim had passed on (nothing was written)" } },
          fails = fails("invalid"),
          raises = "a wrong type for an argument",
          desc = [[
A failed try of an external entry (`engine:settle_external`): stamps the entry
with `retry_at` and `tries` in one update that matches only while the claim is
the caller's, so its backoff holds for every relay and process.]] },
        { method = "pending_spawns", of = "mongostore.Store",
          params = {
            { "opts", "{ limit: integer?, lease: number? }?", "a claim, as `pending_outbox`'s `limit` and `lease`; "
              .. "without a limit: list every entry, unclaimed" },
          },
          returns = { { "entries", "mongostore.SpawnEntry[]", "oldest first (by seq)" } },
          fails = fails("invalid"),
          raises = "a wrong type for an option, an unknown option, or a lease without a limit" },
        { method = "ack_spawn", of = "mongostore.Store",
          params = {
            { "seq", "integer", "the entry's seq" },
            { "token", "string?", "the claim's token" },
          },
          returns = { { "ok", "true", "the entry is gone" } },
          fails = fails("invalid"),
          raises = "a wrong type for `seq` or `token`" },
        { method = "release_spawn", of = "mongostore.Store",
          params = {
            { "source_id", "string", "the parent the entries were claimed from" },
            { "token", "string", "the claim's token" },
          },
          returns = { { "ok", "true", "the rest of the claim is given back" } },
          fails = fails("invalid"),
          raises = "a wrong type for an argument" },
        { class = "mongostore.OutboxEntry",
          desc = "A pending outbox entry.",
          fields = {
            { "seq", "integer", "unique, increasing" },
            { "target_id", "string?", "the execution it goes to; nil: an external event" },
            { "event", "mongostore.Event", "the event" },
            { "source_id", "string?", "(claimed) the execution that emitted it" },
            { "token", "string?", "(claimed) the claim's token" },
            { "lease_until", "number?", "(claimed) epoch seconds the claim holds until" },
            { "tries", "integer?", "(external) failed tries so far (`settle_external`)" },
            { "retry_at", "number?", "(external) epoch seconds of its next try" },
            { "claim_size", "integer?", "(`claim_external`) the entries its claim holds" },
          } },
        { class = "mongostore.SpawnEntry",
          desc = "A pending spawn entry.",
          fields = {
            { "seq", "integer", "unique, increasing" },
            { "parent_id", "string", "the parent execution" },
            { "child_id", "string", "the child to create" },
            { "root_path", "string", "the region it runs" },
            { "context", "table<string, any>?", "its starting context" },
            { "source_id", "string?", "(claimed) the parent" },
            { "token", "string?", "(claimed) the claim's token" },
            { "lease_until", "number?", "(claimed) epoch seconds the claim holds until" },
          } },
      },
    },
    {
      title = "Timers",
      entries = {
        { method = "due_timers", of = "mongostore.Store",
          params = {
            { "now", "number", "epoch seconds" },
            { "opts", "{ limit: integer? }?", "`limit` (>= 1) bounds the documents read (each may hold several "
              .. "due timers)" },
          },
          returns = {
            { "timers", "mongostore.DueTimer[]", "by fire_at, then execution id, then path" },
            { "read", "integer", "the documents read (fewer than `limit`: there are no more)" },
          },
          fails = fails("invalid"),
          raises = "a wrong type for `now` or `limit`",
          desc = [[
Reads only documents with something due, by the index on `next_fire_at`.
A document whose mark a fired or cancelled timer left low is read once
with nothing listed, and its mark raised (one bulk write for all such
documents of the read).
On a store with a `prefix`, first it brings up to date the promoted fields
of the documents harel's own store committed last (found by the partial index `harel_written`, one find,
and one bulk write when there are any), so a timer harel armed is due here
too, on a document either side created.]] },
        { method = "delete_timer", of = "mongostore.Store",
          params = {
            { "execution_id", "string", "the execution" },
            { "path", "string", "the timer's state path" },
            { "fire_at", "number", "the fire_at it was due at" },
          },
          returns = { { "ok", "true", "disarmed, or re-armed since (then left alone)" } },
          fails = fails("invalid"),
          raises = "a wrong type for an argument",
          desc = "Unsets the timer only while it still holds exactly this fire_at, so a stale sweep cannot "
            .. "remove a re-armed timer." },
        { method = "delete_timers", of = "mongostore.Store",
          params = {
            { "timers", "mongostore.DueTimer[]", "the timers to disarm (`due_timers`' rows do)" },
          },
          returns = { { "ok", "true", "each one disarmed, or re-armed since (then left alone)" } },
          fails = fails("invalid"),
          raises = "a `timers` that is not a list of tables, or a field of the wrong type",
          desc = "`delete_timer` for a sweep's timers in one unordered bulk write, each update guarded on its "
            .. "own fire_at. Every item is checked before anything is sent: one that cannot be a timer "
            .. "(an empty or `$` path, a fire_at that is not finite) answers `invalid`, naming it, and nothing "
            .. "is deleted; an empty list sends nothing." },
        { class = "mongostore.DueTimer",
          desc = "A timer that is due.",
          fields = {
            { "execution_id", "string", "" },
            { "path", "string", "the state path" },
            { "fire_at", "number", "epoch seconds" },
          } },
      },
    },
    {
      title = "Trace",
      entries = {
        { method = "append_trace", of = "mongostore.Store",
          params = {
            { "execution_id", "string", "the execution" },
            { "entry", "mongostore.TraceStep", "the step" },
          },
          returns = { { "ok", "true", "appended" } },
          fails = fails("invalid", "too_large"),
          raises = "a wrong type for an argument",
          desc = "The standalone trace writer (a commit's `trace` option is the usual way); upserts, and "
            .. "keeps the last `trace_max` steps." },
        { method = "read_trace", of = "mongostore.Store",
          params = { { "execution_id", "string", "the execution" } },
          returns = { { "steps", "mongostore.TraceStep[]", "oldest first; empty when there is none" } },
          fails = fails("invalid") },
      },
    },
    {
      title = "The store itself",
      entries = {
        { method = "stats", of = "mongostore.Store",
          params = {},
          returns = { { "counts", "table<string, integer>", "commands sent through the store's pool (counted as each "
            .. "completes), by name (`find`, `update`, ...), plus `total` and `reply_bytes`" } },
          fails = { "closed" },
          desc = "From libmongoc's command monitoring; the pool is shared by every store of the process on the "
            .. "same URI." },
        { method = "info", of = "mongostore.Store",
          params = {},
          returns = { { "info", "mongostore.StoreInfo", "where it stores and its settings" } },
          fails = { "closed" } },
        { class = "mongostore.StoreInfo",
          desc = "What `store:info()` returns.",
          fields = {
            { "db", "string", "database name" },
            { "executions", "string", "the executions collection" },
            { "counters", "string", "the counters collection" },
            { "trace_max", "integer", "" },
            { "max_bson", "integer", "the server's maximum document size, in bytes" },
            { "dedupe_window", "integer", "" },
            { "seq_block", "integer", "" },
          } },
        { method = "close", of = "mongostore.Store",
          params = {},
          returns = {},
          desc = "Gives the client back to the pool. Idempotent; a later call returns `nil, msg, \"closed\"`. "
            .. "Garbage collection and `<close>` close a store too." },
      },
    },
    {
      title = "Utilities",
      entries = {
        { fn = "now", module = "mongostore", params = {},
          returns = { { "t", "number", "epoch seconds, with sub-second precision" } } },
        { fn = "sleep", module = "mongostore",
          params = { { "s", "number", "seconds" } },
          returns = {},
          desc = "Blocks the calling thread (not for OpenResty request handlers)." },
        { fn = "uuid", module = "mongostore", params = {},
          returns = { { "id", "string", "16 random bytes as 32 hex digits (harel's `uuid4().hex`)" } } },
        { fn = "check_keys", module = "mongostore",
          params = {
            { "t", "table", "an option table" },
            { "known", "table<string, true>", "the names it may hold" },
            { "fn", "string", "the function, for the message" },
            { "what", "string", "what a key is (`option`, `filter`)" },
          },
          returns = {},
          raises = "a key not in `known` (`<fn>: unknown <what> <key>`, blamed on the caller's caller)",
          desc = "The check every call of the library makes of its option tables: a misspelt option is a "
            .. "programming mistake." },
        { field = "_VERSION", module = "mongostore", type = "string",
          desc = "The library's version (the rockspec's, also `mongostore.core.version`)." },
        { class = "mongostore.Store", exposed_as = "mongostore.Store",
          desc = "A connection to one database, from `mongostore.connect` (`tostring` names the database "
            .. "and collection)." },
      },
    },
  },
}

------------------------------------------------------------------------
-- documents

-- The codes every call of the document API can return: its own, then these.
local DOC_FAILS = { "transient", "network", "timeout", "unavailable", "server", "closed" }

local function doc_fails(...)
  local out = { ... }
  for _, c in ipairs(DOC_FAILS) do out[#out + 1] = c end
  return out
end

-- The fourth value of a document API failure.
local DETAIL = { { "detail", "mongostore.ErrorDetail?", "the server's code and error labels, when it gave them" } }

local SESSION_OPT = { "session", "mongostore.Session?", "run the operation in this session (and its transaction)" }
local SANITIZE_OPT = { "sanitize", "boolean?", "take the filter as a client's data first (`mongostore.sanitize`): "
  .. "an operator in a field's value is compared with `$eq`; a top-level operator other than `$and`/`$or`/`$nor`, "
  .. "or server-side JavaScript, returns `invalid` and sends nothing", default = "false" }

api.pages[#api.pages + 1] = {
  file = "documents",
  title = "Documents",
  module = "mongostore",
  summary = "`mongostore.database`: databases, collections, cursors, bulk writes, indexes, sessions and "
    .. "transactions on application documents.",
  intro = [[
`local db = assert(mongostore.database(uri, { db = "app" }))`. The document
API stores application documents (not executions) on the same process-wide
client pool as `mongostore.connect`. Documents are read and written under the
document rules ([values](values.md#how-documents-read-and-write)): every BSON type comes back (a
box where Lua has no type), and a table read from a document remembers the
order of its fields and which numbers were int32s and doubles, so writing it
back changes nothing.

Every operation returns `nil, message, code[, detail]` when it fails
([errors](errors.md)); the message starts with what was being done
(`insert_one articles: ...`), `detail` carries the server's code and error
labels when it gave them. A wrong Lua type for an argument or an option, or an
unknown option, raises, naming the method and the argument
(`find: opts.limit must be a number, got string`). Every operation takes
`opts.session` (a [Session](#type-session)) to run inside it. Indexes in
results and errors are 1-based.

`sort`, `projection`, index `keys` and a `hint` given as a document are
ordered: pass a list of pairs, `{ { "a", 1 }, { "b", -1 } }`, or a table of one
key, `{ a = 1 }` (a table of more keys is refused for `sort`, `keys` and
`hint`, since Lua tables have no order; a projection's order does not
matter). `command` takes its command the same way.]],
  sections = {
    {
      title = "Databases",
      entries = {
        { fn = "database", module = "mongostore",
          params = {
            { "uri", "string", "a MongoDB URI, as `mongostore.connect` takes; its database is the default" },
            { "opts", "mongostore.DatabaseOptions?", "the database and how long to wait for the server" },
          },
          returns = { { "db", "mongostore.Database", "a handle holding one client of the pool" } },
          fails = { "invalid", "unavailable", "network", "timeout", "server" },
          raises = "a wrong type for `uri`, `opts` or an option, or an unknown option",
          desc = [[
Waits for the server as `connect` does (up to `opts.wait` seconds) and takes
one client of the process's pool for the URI, the pool `connect` uses, and
keeps it for the handle's life (a session's operations must all go through
the client that started it). A database name that is not letters, digits, `_`
and `-`, no database at all (neither `opts.db` nor one in the URI), or a
malformed URI is `invalid`.]],
          example = [[
local db = assert(mongostore.database("mongodb://127.0.0.1:27017", { db = "app", wait = 30 }))
local articles = assert(db:collection("articles"))]] },
        { class = "mongostore.DatabaseOptions",
          desc = "The options of `mongostore.database`; an unknown key raises.",
          fields = {
            { "db", "string?", "database name (letters, digits, `_` and `-`)", default = "the URI's" },
            { "wait", "number?", "seconds to keep retrying the first contact (0 to 86400)", default = "30" },
          } },
        { class = "mongostore.Database",
          desc = [[
A database handle, from `mongostore.database`. `tostring` names the database.
Closed by `db:close()`, by garbage collection and by `<close>`; its collections,
cursors and sessions keep it alive.]] },
        { method = "collection", of = "mongostore.Database",
          params = { { "name", "string", "the collection's name" } },
          returns = { { "coll", "mongostore.Collection", "nothing is sent: the collection need not exist" } },
          fails = { "invalid", "closed" },
          raises = "a `name` that is not a string",
          desc = "A name MongoDB does not take (empty, not UTF-8, a NUL or a `$` inside, over 200 bytes) is "
            .. "`invalid`." },
        { method = "command", of = "mongostore.Database",
          params = {
            { "cmd", "table", "the command, ordered: a list of pairs whose first names the command, or a "
              .. "table of one key" },
            { "opts", "mongostore.SessionOptions?", "the session" },
          },
          returns = { { "reply", "table", "the server's reply, as a document" } },
          fails = doc_fails("invalid", "duplicate", "too_large"),
          fails_extra = DETAIL,
          raises = "a `cmd` that is not a table, a wrong type for an option, or an unknown option",
          example = [[
local reply = assert(db:command({ { "count", "articles" }, { "query", { draft = true } } }))]] },
        { method = "list_collections", of = "mongostore.Database",
          params = { { "opts", "mongostore.SessionOptions?", "the session" } },
          returns = { { "entries", "table[]", "the server's entries (`name`, `type`, `options`, ...)" } },
          fails = doc_fails(),
          fails_extra = DETAIL,
          raises = "a wrong type for an option, or an unknown option" },
        { method = "info", of = "mongostore.Database", params = {},
          returns = { { "info", "mongostore.DatabaseInfo", "from the selected server's hello" } },
          fails = { "unavailable", "network", "timeout", "server", "closed" } },
        { class = "mongostore.DatabaseInfo",
          desc = "What `db:info()` returns.",
          fields = {
            { "wire_version", "integer", "the server's maxWireVersion" },
            { "replica_set", "string|false", "the replica set's name; false for a standalone or a mongos" },
            { "transactions", "boolean", "whether the server runs transactions (sessions, and a replica set at "
              .. "wire version 7 or a mongos at 8)" },
            { "max_bson_size", "integer", "the server's largest document, in bytes" },
            { "db", "string", "the database's name" },
          } },
        { method = "stats", of = "mongostore.Database", params = {},
          returns = { { "counts", "table<string, integer>", "commands sent through the handle's pool (counted as each "
            .. "completes), by name "
            .. "(`find`, `update`, `insert`, `findAndModify`, ...), plus `total` and `reply_bytes`" } },
          fails = { "closed" },
          desc = "As `store:stats()`: from libmongoc's command monitoring, for the pool the handle's client came "
            .. "from (shared by every handle and store of the process on the URI). Two readings tell what a "
            .. "piece of code sent.",
          example = [[
local before = db:stats().total
assert(doc:save())
print(db:stats().total - before)   -- 0 for an unchanged document]] },
        { method = "name", of = "mongostore.Database", params = {},
          returns = { { "name", "string", "the database's name" } },
          fails = { "closed" } },
        { method = "close", of = "mongostore.Database", params = {}, returns = {},
          desc = [[
Closes its cursors (killing them on the server) and its sessions (aborting an
open transaction), then gives the client back to the pool. Idempotent; every
later call on the database, its collections, cursors and sessions returns
`nil, msg, "closed"`.]] },
      },
    },
    {
      title = "Inserting",
      entries = {
        { class = "mongostore.Collection",
          desc = [[
A collection of a database, from `db:collection(name)`; `tostring` names the
database and the collection. Documents are checked whole before anything is
sent: a value the document rules refuse is `invalid`, a document over the
server's limit `too_large`, and a document to store (an insert, a replacement)
with a top-level key starting with `$` is `invalid` (an update given where a
document belongs).]] },
        { method = "insert_one", of = "mongostore.Collection",
          params = {
            { "doc", "table", "the document; an ObjectId `_id` is added first when it has none" },
            { "opts", "mongostore.SessionOptions?", "the session" },
          },
          returns = { { "result", "mongostore.InsertOneResult", "the id it was stored under" } },
          fails = doc_fails("duplicate", "invalid", "too_large"),
          fails_extra = DETAIL,
          raises = "a `doc` that is not a table, a wrong type for an option, or an unknown option",
          desc = "`duplicate` names the key in its message (server code 11000).",
          example = [[
local r = assert(articles:insert_one({ title = "Hello", tags = mongostore.array() }))
print(r.inserted_id)   -- an ObjectId]] },
        { method = "insert_many", of = "mongostore.Collection",
          params = {
            { "docs", "table[]", "a non-empty list of documents" },
            { "opts", "mongostore.BulkOptions?", "ordered, and the session" },
          },
          returns = { { "result", "mongostore.InsertManyResult", "the ids inserted and the documents refused" } },
          fails = doc_fails("invalid", "too_large"),
          fails_extra = DETAIL,
          raises = "a `docs` that is not a table, a wrong type for an option, or an unknown option",
          desc = [[
Every document is encoded before any is sent: one the rules refuse fails the
whole call (`invalid`, nothing written). A document the server refuses (a
duplicate key, say) is one of `result.errors`, not a failure of the call; an
ordered insert stops at its first error, an unordered one goes on.]],
          example = [[
local r = assert(articles:insert_many({ { _id = 1 }, { _id = 1 }, { _id = 2 } }, { ordered = false }))
-- r.inserted = { [1] = 1, [3] = 2 },
-- r.errors = { { index = 2, message = "...", code = "duplicate", detail = { server_code = 11000 } } }]] },
        { class = "mongostore.SessionOptions",
          desc = "The options of the calls that take only a session; an unknown key raises.",
          fields = { SESSION_OPT } },
        { class = "mongostore.BulkOptions",
          desc = "The options of `insert_many` and `bulk_write`; an unknown key raises.",
          fields = {
            { "ordered", "boolean?", "stop at the first failed write (false: go on, in any order)",
              default = "true" },
            SESSION_OPT,
          } },
        { class = "mongostore.InsertOneResult",
          desc = "What `insert_one` returns.",
          fields = { { "inserted_id", "any", "the document's `_id` (its own, or the ObjectId added)" } } },
        { class = "mongostore.InsertManyResult",
          desc = "What `insert_many` returns.",
          fields = {
            { "inserted", "table<integer, any>", "the `_id` of each document inserted, by its index in `docs`" },
            { "errors", "mongostore.WriteError[]", "the documents the server refused (an empty array when none)" },
          } },
        { class = "mongostore.WriteError",
          desc = "One write of a batch that the server refused (`insert_many`, `bulk_write`), in the shape every "
            .. "batch result shares.",
          fields = {
            { "index", "integer", "the write's index in the list given (1-based)" },
            { "message", "string", "what the server said, after what was being done" },
            { "code", "mongostore.ErrorCode", "`duplicate` for a duplicate key, otherwise `server`" },
            { "detail", "mongostore.ErrorDetail", "`server_code`: the server's code" },
          } },
      },
    },
    {
      title = "Finding and counting",
      entries = {
        { method = "find_one", of = "mongostore.Collection",
          params = {
            { "filter", "table?", "the query", default = "{} (any document)" },
            { "opts", "mongostore.FindOneOptions?", "projection, sort, skip, hint, session" },
          },
          returns = { { "doc", "table?", "the first document that matches; nil when none does" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `filter` that is not a table or nil, a wrong type for an option, or an unknown option",
          example = [[
local doc = articles:find_one({ title = "Hello" }, { projection = { title = 1, _id = 0 } })]] },
        { method = "find", of = "mongostore.Collection",
          params = {
            { "filter", "table?", "the query", default = "{} (every document)" },
            { "opts", "mongostore.FindOptions?", "projection, sort, skip, limit, batch_size, hint, session" },
          },
          returns = { { "cursor", "mongostore.Cursor", "with its first batch read" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `filter` that is not a table or nil, a wrong type for an option, or an unknown option",
          desc = "The query is sent now, so a query the server refuses fails here rather than at the first "
            .. "`next`.",
          example = [[
local cursor = assert(articles:find({ draft = false }, { sort = { { "at", -1 } }, limit = 20 }))
for doc in cursor:each() do print(doc.title) end]] },
        { method = "count", of = "mongostore.Collection",
          params = {
            { "filter", "table?", "the query", default = "{} (every document)" },
            { "opts", "mongostore.CountOptions?", "skip, limit, hint, session" },
          },
          returns = { { "n", "integer", "how many documents match" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `filter` that is not a table or nil, a wrong type for an option, or an unknown option",
          desc = "Counts the matching documents with an aggregation (libmongoc's count_documents), not from "
            .. "the collection's metadata." },
        { method = "distinct", of = "mongostore.Collection",
          params = {
            { "field", "string", "the field (a dotted path)" },
            { "filter", "table?", "the query", default = "{} (every document)" },
            { "opts", "mongostore.FilterOptions?", "sanitize, session" },
          },
          returns = { { "values", "any[]", "the distinct values (an array)" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `field` that is not a string, a `filter` that is not a table or nil, a wrong type for "
            .. "an option, or an unknown option" },
        { method = "aggregate", of = "mongostore.Collection",
          params = {
            { "pipeline", "table[]", "the stages, a list (empty: every document)" },
            { "opts", "mongostore.AggregateOptions?", "batch_size, hint, session" },
          },
          returns = { { "cursor", "mongostore.Cursor", "with its first batch read" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `pipeline` that is not a table, a wrong type for an option, or an unknown option",
          example = [[
local cursor = assert(articles:aggregate({
  { ["$match"] = { draft = false } },
  { ["$group"] = { _id = "$author", n = { ["$sum"] = 1 } } },
}))]] },
        { class = "mongostore.FindOneOptions",
          desc = "The options of `find_one`; an unknown key raises.",
          fields = {
            { "projection", "table?", "the fields to return (`{ title = 1 }`, or a list of pairs)" },
            { "sort", "table?", "the order, which picks the first: a list of pairs, or a table of one key" },
            { "skip", "integer?", "skip this many matches first (>= 0)" },
            { "hint", "string|table?", "the index to use: its name, or its keys (ordered)" },
            SANITIZE_OPT,
            SESSION_OPT,
          } },
        { class = "mongostore.FindOptions", parent = "mongostore.FindOneOptions",
          desc = "The options of `find`; an unknown key raises.",
          fields = {
            { "limit", "integer?", "at most this many documents (>= 0; 0: no limit)", default = "0" },
            { "batch_size", "integer?", "documents per reply from the server (>= 0)", default = "the server's" },
          } },
        { class = "mongostore.CountOptions",
          desc = "The options of `count`; an unknown key raises.",
          fields = {
            { "skip", "integer?", "skip this many matches first (>= 0)" },
            { "limit", "integer?", "count at most this many (>= 0)" },
            { "hint", "string|table?", "the index to use: its name, or its keys (ordered)" },
            SANITIZE_OPT,
            SESSION_OPT,
          } },
        { class = "mongostore.AggregateOptions",
          desc = "The options of `aggregate`; an unknown key raises.",
          fields = {
            { "batch_size", "integer?", "documents per reply from the server (>= 0)", default = "the server's" },
            { "hint", "string|table?", "the index to use: its name, or its keys (ordered)" },
            SESSION_OPT,
          } },
      },
    },
    {
      title = "Cursors",
      entries = {
        { class = "mongostore.Cursor",
          desc = [[
The documents of a `find` or an `aggregate`, read a batch at a time
(`batch_size`). The server cursor is killed when the Cursor is closed, when it
is exhausted, when it is collected and when its database closes; `tostring`
says what it reads and whether it is closed.]] },
        { method = "next", of = "mongostore.Cursor", params = {},
          returns = { { "doc", "table?", "the next document; nil at the end" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          desc = "A closed cursor (or one of a closed database) returns `nil, msg, \"closed\"`." },
        { method = "all", of = "mongostore.Cursor", params = {},
          returns = { { "docs", "table[]", "the documents not read yet, in order (an array)" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          desc = "Reads to the end: the cursor is exhausted afterwards." },
        { method = "each", of = "mongostore.Cursor", params = {},
          returns = { { "iter", "fun(): table?", "for a generic `for`: the next document, nil at the end" } },
          desc = [[
`for doc in cursor:each() do ... end`; the cursor is closed when the loop has
read the last document. A failure raises inside the loop (a `for` has no place
for `nil, msg, code`), with the message and its code:
`find articles: ... (network)`.]] },
        { method = "close", of = "mongostore.Cursor", params = {}, returns = {},
          desc = "Kills the server cursor if it is still open. Idempotent; `<close>` closes it too." },
        { method = "id", of = "mongostore.Cursor", params = {},
          returns = { { "id", "integer|mongostore.Int64", "the server's cursor id; 0 once nothing is left on "
            .. "the server" } },
          desc = "For a `getMore` or `killCursors` of one's own through `db:command`." },
      },
    },
    {
      title = "Updating, replacing, deleting",
      entries = {
        { method = "update_one", of = "mongostore.Collection",
          params = {
            { "filter", "table", "which document" },
            { "update", "table", "update operators (`{ [\"$set\"] = { ... } }`), or a pipeline (a list of stages)" },
            { "opts", "mongostore.UpdateOptions?", "upsert, session" },
          },
          returns = { { "result", "mongostore.UpdateResult", "what matched and changed" } },
          fails = doc_fails("duplicate", "invalid", "too_large"),
          fails_extra = DETAIL,
          raises = "a `filter` or `update` that is not a table, a wrong type for an option, or an unknown option",
          desc = "Updates the first document that matches.",
          example = [[
local r = assert(articles:update_one({ _id = id }, { ["$inc"] = { views = 1 } }))
-- r.matched == 1, r.modified == 1]] },
        { method = "update_many", of = "mongostore.Collection",
          params = {
            { "filter", "table", "which documents" },
            { "update", "table", "update operators, or a pipeline" },
            { "opts", "mongostore.UpdateOptions?", "upsert, session" },
          },
          returns = { { "result", "mongostore.UpdateResult", "what matched and changed" } },
          fails = doc_fails("duplicate", "invalid", "too_large"),
          fails_extra = DETAIL,
          raises = "a `filter` or `update` that is not a table, a wrong type for an option, or an unknown option",
          desc = "Updates every document that matches." },
        { method = "replace_one", of = "mongostore.Collection",
          params = {
            { "filter", "table", "which document" },
            { "replacement", "table", "the new document (no top-level `$` key)" },
            { "opts", "mongostore.UpdateOptions?", "upsert, session" },
          },
          returns = { { "result", "mongostore.UpdateResult", "what matched and changed" } },
          fails = doc_fails("duplicate", "invalid", "too_large"),
          fails_extra = DETAIL,
          raises = "a `filter` or `replacement` that is not a table, a wrong type for an option, or an unknown "
            .. "option",
          desc = "A document read with `find_one` and given back here is written byte for byte as it came, "
            .. "but for the fields changed in between.",
          example = [[
local doc = assert(articles:find_one({ _id = id }))
doc.title = "Hello again"
assert(articles:replace_one({ _id = id }, doc))]] },
        { method = "delete_one", of = "mongostore.Collection",
          params = {
            { "filter", "table", "which document" },
            { "opts", "mongostore.FilterOptions?", "sanitize, session" },
          },
          returns = { { "result", "mongostore.DeleteResult", "how many were deleted (0 or 1)" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `filter` that is not a table, a wrong type for an option, or an unknown option" },
        { method = "delete_many", of = "mongostore.Collection",
          params = {
            { "filter", "table", "which documents (`{}`: all)" },
            { "opts", "mongostore.FilterOptions?", "sanitize, session" },
          },
          returns = { { "result", "mongostore.DeleteResult", "how many were deleted" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `filter` that is not a table, a wrong type for an option, or an unknown option" },
        { method = "find_one_and_update", of = "mongostore.Collection",
          params = {
            { "filter", "table", "which document" },
            { "update", "table", "update operators, or a pipeline" },
            { "opts", "mongostore.FindOneAndUpdateOptions?", "new, upsert, sort, projection, session" },
          },
          returns = { { "doc", "table?", "the document before the update (after it, with `new`); nil when none "
            .. "matched" } },
          fails = doc_fails("duplicate", "invalid", "too_large"),
          fails_extra = DETAIL,
          raises = "a `filter` or `update` that is not a table, a wrong type for an option, or an unknown option",
          example = [[
local counter = assert(counters:find_one_and_update({ _id = "orders" }, { ["$inc"] = { n = 1 } },
                                                     { new = true, upsert = true }))]] },
        { method = "find_one_and_delete", of = "mongostore.Collection",
          params = {
            { "filter", "table", "which document" },
            { "opts", "mongostore.FindOneAndDeleteOptions?", "sort, projection, session" },
          },
          returns = { { "doc", "table?", "the deleted document; nil when none matched" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `filter` that is not a table, a wrong type for an option, or an unknown option" },
        { class = "mongostore.UpdateOptions",
          desc = "The options of `update_one`, `update_many` and `replace_one`; an unknown key raises.",
          fields = {
            { "upsert", "boolean?", "insert a document (the filter's equality fields, then the update) when "
              .. "none matches", default = "false" },
            SANITIZE_OPT,
            SESSION_OPT,
          } },
        { class = "mongostore.FindOneAndUpdateOptions",
          desc = "The options of `find_one_and_update`; an unknown key raises.",
          fields = {
            { "new", "boolean?", "return the document after the update rather than before", default = "false" },
            { "upsert", "boolean?", "insert one when none matches", default = "false" },
            { "sort", "table?", "which one, when several match (ordered)" },
            { "projection", "table?", "the fields to return" },
            SANITIZE_OPT,
            SESSION_OPT,
          } },
        { class = "mongostore.FindOneAndDeleteOptions",
          desc = "The options of `find_one_and_delete`; an unknown key raises.",
          fields = {
            { "sort", "table?", "which one, when several match (ordered)" },
            { "projection", "table?", "the fields to return" },
            SANITIZE_OPT,
            SESSION_OPT,
          } },
        { class = "mongostore.FilterOptions",
          desc = "The options of `delete_one`, `delete_many` and `distinct`; an unknown key raises.",
          fields = { SANITIZE_OPT, SESSION_OPT } },
        { class = "mongostore.UpdateResult",
          desc = "What `update_one`, `update_many` and `replace_one` return.",
          fields = {
            { "matched", "integer", "documents that matched the filter" },
            { "modified", "integer", "documents changed (an update that sets what is there changes nothing)" },
            { "upserted_id", "any?", "the `_id` of the document an upsert inserted" },
          } },
        { class = "mongostore.DeleteResult",
          desc = "What `delete_one` and `delete_many` return.",
          fields = { { "deleted", "integer", "documents deleted" } } },
      },
    },
    {
      title = "Bulk writes",
      entries = {
        { method = "bulk_write", of = "mongostore.Collection",
          params = {
            { "ops", "mongostore.BulkOp[]", "a non-empty list of writes" },
            { "opts", "mongostore.BulkOptions?", "ordered, and the session" },
          },
          returns = { { "result", "mongostore.BulkWriteResult", "the counts, the upserted ids and the writes "
            .. "refused" } },
          fails = doc_fails("invalid", "too_large"),
          fails_extra = DETAIL,
          raises = "an `ops` that is not a table, a wrong type for an option, or an unknown option",
          desc = [[
Sent in as few round trips as the server's limits allow. Every op is checked
before any is sent: a malformed one fails the whole call (`invalid`, nothing
written). A write the server refuses is one of `result.errors`, with its
index in `ops`; an ordered bulk stops there, an unordered one goes on.]],
          example = [[
local r = assert(articles:bulk_write({
  { insert_one = { _id = 3, title = "Three" } },
  { update_one = { filter = { _id = 1 }, update = { ["$set"] = { draft = false } } } },
  { delete_many = { { draft = true } } },   -- filter by position
}, { ordered = false }))]] },
        { class = "mongostore.BulkOp",
          desc = "One write of `bulk_write`: a table with exactly one of these keys.",
          fields = {
            { "insert_one", "table?", "the document to insert (an ObjectId `_id` added when it has none)" },
            { "update_one", "mongostore.BulkUpdate?", "update the first document that matches" },
            { "update_many", "mongostore.BulkUpdate?", "update every document that matches" },
            { "replace_one", "mongostore.BulkReplace?", "replace the first document that matches" },
            { "delete_one", "mongostore.BulkDelete?", "delete the first document that matches" },
            { "delete_many", "mongostore.BulkDelete?", "delete every document that matches" },
          } },
        { class = "mongostore.BulkUpdate",
          desc = "An update of `bulk_write`: by name, or `{ filter, update, upsert = }` by position.",
          fields = {
            { "filter", "table", "which documents (or at [1])" },
            { "update", "table", "update operators or a pipeline (or at [2])" },
            { "upsert", "boolean?", "insert one when none matches", default = "false" },
          } },
        { class = "mongostore.BulkReplace",
          desc = "A replacement of `bulk_write`: by name, or `{ filter, replacement, upsert = }` by position.",
          fields = {
            { "filter", "table", "which document (or at [1])" },
            { "replacement", "table", "the new document (or at [2])" },
            { "upsert", "boolean?", "insert it when none matches", default = "false" },
          } },
        { class = "mongostore.BulkDelete",
          desc = "A delete of `bulk_write`: `{ filter = }`, or `{ filter }` by position.",
          fields = { { "filter", "table", "which documents (or at [1])" } } },
        { class = "mongostore.BulkWriteResult",
          desc = "What `bulk_write` returns.",
          fields = {
            { "inserted", "integer", "documents inserted" },
            { "matched", "integer", "documents the updates and replacements matched" },
            { "modified", "integer", "documents they changed" },
            { "deleted", "integer", "documents deleted" },
            { "upserted", "integer", "documents upserts inserted" },
            { "upserted_ids", "table<integer, any>", "the `_id` each upsert inserted, by its index in `ops`" },
            { "errors", "mongostore.WriteError[]", "the writes the server refused (an empty array when none)" },
          } },
      },
    },
    {
      title = "Indexes and dropping",
      entries = {
        { method = "create_index", of = "mongostore.Collection",
          params = {
            { "keys", "table", "the keys, ordered: a list of pairs, or a table of one key" },
            { "opts", "mongostore.IndexOptions?", "unique, name, partial_filter, sparse, expire_after, session" },
          },
          returns = { { "name", "string", "the index's name" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `keys` that is not a table, a wrong type for an option, or an unknown option",
          desc = "Creating an index that exists with the same keys and options changes nothing.",
          example = [[
assert(articles:create_index({ { "author", 1 }, { "at", -1 } }, { name = "by_author" }))
assert(articles:create_index({ slug = 1 }, { unique = true }))]] },
        { class = "mongostore.IndexOptions",
          desc = "The options of `create_index`; an unknown key raises.",
          fields = {
            { "unique", "boolean?", "refuse a second document with the same keys", default = "false" },
            { "name", "string?", "the index's name", default = "the keys (`author_1_at_-1`)" },
            { "partial_filter", "table?", "index only the documents this filter matches" },
            { "sparse", "boolean?", "leave out documents without the keys", default = "false" },
            { "expire_after", "integer?", "seconds after the date in the key that the server deletes a "
              .. "document (a TTL index)" },
            SESSION_OPT,
          } },
        { method = "list_indexes", of = "mongostore.Collection",
          params = { { "opts", "mongostore.SessionOptions?", "the session" } },
          returns = { { "indexes", "table[]", "the server's entries (`name`, `key`, ...)" } },
          fails = doc_fails(),
          fails_extra = DETAIL,
          raises = "a wrong type for an option, or an unknown option" },
        { method = "drop_index", of = "mongostore.Collection",
          params = {
            { "name", "string", "the index's name" },
            { "opts", "mongostore.SessionOptions?", "the session" },
          },
          returns = { { "ok", "true", "" } },
          fails = doc_fails("invalid"),
          fails_extra = DETAIL,
          raises = "a `name` that is not a string, a wrong type for an option, or an unknown option" },
        { method = "drop", of = "mongostore.Collection",
          params = { { "opts", "mongostore.SessionOptions?", "the session" } },
          returns = { { "ok", "true", "dropped, or there was no such collection" } },
          fails = doc_fails(),
          fails_extra = DETAIL,
          raises = "a wrong type for an option, or an unknown option" },
        { method = "name", of = "mongostore.Collection", params = {},
          returns = { { "name", "string", "the collection's name" } } },
      },
    },
    {
      title = "Sessions and transactions",
      intro = [[
Transactions need a replica set or a sharded cluster; on a standalone server
`db:transaction` and `db:session` return `nil, msg, "unavailable"` and run
nothing. Pass the session to every operation of the transaction as
`opts.session`: one that is left out runs outside it.]],
      entries = {
        { method = "transaction", of = "mongostore.Database",
          params = {
            { "fn", "fun(s: mongostore.Session): any", "the transaction's work; called again from the start "
              .. "when it must be retried" },
            { "opts", "mongostore.TransactionOptions?", "the time limit, and the transaction's options" },
          },
          returns = {
            { "ok", "true", "committed" },
            { "values", "any", "then what `fn` returned, every value" },
          },
          fails = { "transient", "timeout", "invalid", "unavailable", "duplicate", "network", "server", "closed" },
          fails_extra = DETAIL,
          raises = "an `fn` that is not a function, a wrong type for an option, or an unknown option",
          desc = [[
Starts a session and a transaction and calls `fn(session)`, protected; when
`fn` returns, commits, and returns `true` followed by `fn`'s values.

- An operation of the transaction failed with TransientTransactionError (a
  write conflict, or the server aborted the transaction; the session knows,
  `s:transaction_failed()`): `fn` runs again from the start whatever it did
  with the failure: returned it, raised it (`assert(coll:update_one(...))`),
  or returned or raised something else. The transaction could not commit.
- `fn` raises with no such failure behind it: the transaction is aborted and
  `nil, "transaction: fn raised: ...", "invalid", { error = <the raised value> }`
  comes back; never retried (the error is the code's, not the server's).
- `fn` returns `nil, msg, code[, detail]`: the transaction is aborted and that
  comes back, unless the error is transient, which runs `fn` again.
- An error labelled TransientTransactionError (from an operation or the
  commit; code `transient`) runs `fn` again from the start, after a short
  random pause. UnknownTransactionCommitResult retries only the commit.
- After `opts.timeout` seconds it gives up:
  `nil, "transaction: gave up after N s (k attempts): ...", "timeout", detail`,
  with `detail.cause` the last error's code and its labels kept (with
  UnknownTransactionCommitResult among them the transaction may have
  committed).

Called inside another transaction on the same database handle it returns
`invalid`; on a server without transactions, `unavailable`, and `fn` never
runs. Lua errors never unwind through libmongoc: the retry loop is Lua's.]],
          example = [[
local ok, err, code = db:transaction(function(s)
  local from = assert(accounts:find_one_and_update({ _id = "a", balance = { ["$gte"] = 10 } },
                                                   { ["$inc"] = { balance = -10 } }, { session = s }))
  local r, e, c, d = accounts:update_one({ _id = "b" }, { ["$inc"] = { balance = 10 } }, { session = s })
  if not r then return nil, e, c, d end   -- aborted (and run again when transient)
  return from.balance - 10
end, { timeout = 30, write_concern = "majority" })]] },
        { class = "mongostore.TransactionOptions", parent = "mongostore.StartTransactionOptions",
          desc = "The options of `db:transaction`; an unknown key raises.",
          fields = {
            { "timeout", "number?", "seconds before it gives up retrying (> 0)", default = "120" },
          } },
        { method = "session", of = "mongostore.Database", params = {},
          returns = { { "s", "mongostore.Session", "a new session on the database's client" } },
          fails = { "unavailable", "network", "timeout", "server", "closed" },
          desc = "For transactions run by hand; `db:transaction` makes its own. A server without sessions "
            .. "is `unavailable`." },
        { class = "mongostore.Session",
          desc = [[
A client session, from `db:session()` (or the one `db:transaction` passes to
`fn`). Closed by `s:close()`, by garbage collection, by `<close>` and with its database;
its methods then return `nil, msg, "closed"`, and as `opts.session` it is
`invalid` (so is a session of another database handle).]] },
        { method = "start_transaction", of = "mongostore.Session",
          params = { { "opts", "mongostore.StartTransactionOptions?", "the transaction's concerns and time limit" } },
          returns = { { "ok", "true", "started: nothing is sent until the first operation" } },
          fails = { "invalid", "unavailable", "server", "closed" },
          raises = "an `opts` that is not a table, a wrong type or value for an option, or an unknown option",
          desc = "A transaction open already is `invalid`; a server without transactions `unavailable`." },
        { class = "mongostore.StartTransactionOptions",
          desc = "The options of `s:start_transaction`; an unknown key raises.",
          fields = {
            { "read_concern", "string|{ level: string }?", "the read concern level (`\"snapshot\"`, "
              .. "`\"majority\"`, ...)", default = "the client's" },
            { "write_concern", "integer|string|{ w: integer|string?, j: boolean?, wtimeout: integer? }?",
              "`w` (a number, `\"majority\"` or a tag) or the whole concern (`wtimeout` in ms)",
              default = "the client's" },
            { "read_preference", "string?", "`primary`, `primaryPreferred`, `secondary`, `secondaryPreferred` "
              .. "or `nearest`", default = "\"primary\"" },
            { "max_commit_time_ms", "integer?", "how long the server may take over the commit (>= 0)" },
          } },
        { method = "commit", of = "mongostore.Session", params = {},
          returns = { { "ok", "true", "committed" } },
          fails = { "transient", "invalid", "network", "timeout", "server", "unavailable", "closed" },
          fails_extra = { { "detail", "mongostore.ErrorDetail?", "with the label UnknownTransactionCommitResult "
            .. "the transaction may have committed: commit again" } },
          desc = "No transaction open is `invalid`. A commit that failed may be tried again." },
        { method = "abort", of = "mongostore.Session", params = {},
          returns = { { "ok", "true", "aborted" } },
          fails = { "invalid", "closed" },
          desc = "The server's answer does not matter: the transaction is over either way. No transaction "
            .. "open is `invalid`." },
        { method = "in_transaction", of = "mongostore.Session", params = {},
          returns = { { "yes", "boolean", "whether a transaction is open (false once closed)" } } },
        { method = "transaction_failed", of = "mongostore.Session", params = {},
          returns = { { "yes", "boolean", "whether an operation of the current transaction failed with "
            .. "TransientTransactionError (false once closed)" } },
          desc = "Such a transaction cannot commit: abort it and run it again from `s:start_transaction()`, "
            .. "which clears this. `db:transaction` reads it when `fn` raised." },
        { method = "close", of = "mongostore.Session", params = {},
          returns = { { "ok", "true", "" } },
          desc = "Ends the session, aborting an open transaction. Idempotent." },
      },
    },
    {
      title = "Client values",
      entries = {
        { fn = "sanitize", module = "mongostore",
          params = { { "filter", "table?", "a filter built from a client's values (decoded JSON, a query string)" } },
          returns = { { "filter", "table", "a new filter, the caller's left as it was" } },
          fails = { "invalid" },
          desc = [[
The document API sends a filter as written, operators and all, as a driver
does. A client's value in it can be an operator (`{ password = { ["$ne"] =
null } }` from `{"password": {"$ne": null}}`). `sanitize` takes the filter as
data: a field's value holding an operator key, or a regex, is wrapped in
`$eq`, so it is compared rather than run; `$and`, `$or` and `$nor` keep their
meaning, and their items are sanitized the same way. Any other top-level
operator (`$expr`, `$text`, `$where`, `$comment`, ...) makes the filter
`invalid`, and so does server-side JavaScript (`$where`, `$function`,
`$accumulator`) anywhere in it. The methods that take a filter also take
`sanitize = true` in their options to do the same before sending.]],
          example = [[
local body = assert(mongostore.json.decode(ngx.req.get_body_data()))
local user = users:find_one({ name = body.name, password_hash = hash(body.password) }, { sanitize = true })]] },
      },
    },
  },
}

------------------------------------------------------------------------
-- values

-- The models (mongostore.model): what a call returns when it fails, and the
-- options param of a call: the names of the options it takes, and no other.
local MODEL_FAILS = "Fails with `nil, message, code, detail` ([`ModelFailureDetail`](#type-modelfailuredetail))"
local function MOPTS(names) return { "opts", "mongostore.ModelOptions?", names } end

api.pages[#api.pages + 1] = {
  file = "models",
  title = "Models",
  module = "mongostore.model",
  summary = "`mongostore.model`: models on the document API: change tracking, atomic updates, revisions, "
    .. "timestamps, soft delete, bulk writes, validation and transactions with in-memory rollback.",
  intro = [[
`local model = require "mongostore.model"`. A model is declared once with
`model.define` (its collection, fields, roles and indexes) and bound to a
database with `model.registry(db, { Article })`, which creates its indexes. Its
documents are plain Lua tables with the model's metatable: `a.title` reads
and writes the field, `a.id` is `_id` (an ObjectId unless the model declares
another id type) and `a.is_new` is true until it is stored.

A document remembers what it looked like when it was read (a snapshot, taken
once per document at load): `a:save()` sends only the difference (nested
documents as dotted paths, a changed array whole, a removed key `$unset`),
and nothing at all when nothing changed. Every write path bumps the model's
revision (`"revision"` field: 0 after `insert`, 1 after an `upsert` that
inserts) and sets `updated_at`; `created_at` is set on insert; both are BSON
dates (`mongostore.date`). A save whose revision moved on fails `stale` and
leaves the document as it was; `reload` brings it up to date. With a
`"deleted_at"` field, `delete()` hides the document from every read and
write path (get, find, count, distinct, aggregate, the updates, bulk_write)
unless the call is `unscoped`; `delete{ hard = true }` removes it.

Failures a caller handles come back as `nil, message, code, detail`, as in
every layer: `message` a string saying what was being done and what went
wrong, `code` one of `stale`, `not_found`, `duplicate`, `validation`,
`invalid`, `transaction` or the document API's codes, and `detail` a
[`ModelFailureDetail`](#type-modelfailuredetail) or nil holding every
structured fact (the values a validation refused, the documents a bulk save
did not write, the revision a stale copy found). A failure of the server
keeps the document API's detail table (its `server_code` and `labels`), the
model's facts added to it, so `return nil, message, code, detail` from a
transaction's fn retries a transient failure. Every batch result lists what
failed in one shape: `{ index =, message =, code =, detail = }`. Mistakes in
the code raise: an unknown field, a change to the id or to an immutable
field, a wrong argument type, an option the call does not take (each call's
reference lists its own). Plain filter tables are accepted wherever a `Q`
condition is.]],
  sections = {
    {
      title = "Declaring models",
      entries = {
        { fn = "define", module = "mongostore.model",
          params = { { "spec", "mongostore.ModelSpec", "the collection, the fields, the indexes" } },
          returns = { { "Model", "mongostore.Model",
                        "the model: its class methods, and `Model(fields)` for a new document" } },
          raises = "a malformed declaration: an unknown type, role or key, a default of the wrong type, a field "
            .. "named as a method (`save`, `delete`, ...) or `id`/`is_new`, two fields of one role",
          desc = [[
Everything a write needs is worked out here, once: the checks of each field,
the defaults, the roles, what a save never diffs. Instance methods of your
own go in `spec.methods`.]],
          example = [[
local Article = model.define {
  name = "Article", collection = "articles",
  fields = {
    title = { "string", default = "" }, views = { "integer", default = 0 },
    tags = { "array", of = "string", default = {} },
    author = { "document", fields = { name = { "string", required = true } } },
    created_at = "created_at", updated_at = "updated_at", deleted_at = "deleted_at",
    rev = "revision",
  },
  indexes = { { keys = { { "title", 1 } }, unique = true } },
}]] },
        { class = "mongostore.ModelSpec",
          desc = "What `model.define` takes; an unknown key raises.",
          fields = {
            { "collection", "string", "the collection's name" },
            { "fields", "table<string, string|mongostore.FieldSpec>?", "field name -> a type name, a role "
              .. "(`created_at`, `updated_at`, `deleted_at`, `revision`) or a declaration; `id` declares the "
              .. "id's type (ObjectId when not declared)" },
            { "indexes", "mongostore.IndexSpec[]?", "created by `model.registry`" },
            { "validate_writes", "boolean?", "check every write (false: only where a call asks)",
              default = "true" },
            { "name", "string?", "the model's name in messages", default = "the collection's" },
            { "methods", "table<string, function>?", "methods of the model's documents" },
          } },
        { class = "mongostore.FieldSpec",
          desc = [[
A field's declaration: `{ type, ... }`. The types: `string`, `integer`,
`number`, `boolean`, `date`, `objectid`, `decimal`, `binary`, `array`,
`document`, `any`. A value of `mongostore.null` passes any field that is not
required.]],
          fields = {
            { "[1]", "string", "the type, or a role" },
            { "default", "any?", "the value of a new document that has none (a table is copied per document; a "
              .. "function is called)" },
            { "required", "boolean?", "a document without it is refused", default = "false" },
            { "of", "string|mongostore.FieldSpec?", "an array's items" },
            { "fields", "table<string, string|mongostore.FieldSpec>?", "a document's (or an array's items') fields; "
              .. "without it a document is free-form" },
            { "enum", "any[]?", "the values it may take" },
            { "min", "number?", "the least value (a string's or an array's length)" },
            { "max", "number?", "the greatest value (or length)" },
            { "check", "fun(v: any): boolean?, string?", "a check of your own: true, or nil and why" },
            { "immutable", "boolean?", "written on insert only; a change raises", default = "false" },
          } },
        { class = "mongostore.IndexSpec",
          desc = [[
A declared index. A unique index of a soft-deleting model is partial: it
holds only the documents whose `deleted_at` is missing or null (the filter
`{ deleted_at = null }`, an equality, which partial filters allow where
`$exists: false` is not), so a deleted document never blocks a live one.
mongo-java-server ignores partial filters.]],
          fields = {
            { "keys", "table", "the keys, ordered: `{ { \"title\", 1 } }`" },
            { "unique", "boolean?", "refuse a second document with the same keys", default = "false" },
            { "name", "string?", "the index's name", default = "the keys'" },
            { "partial_filter", "table?", "index only the documents this filter matches" },
            { "sparse", "boolean?", "leave out documents without the keys", default = "false" },
            { "expire_after", "integer?", "a TTL index's seconds" },
            { "include_deleted", "boolean?", "a unique index that counts soft-deleted documents too",
              default = "false" },
          } },
        { fn = "registry", module = "mongostore.model",
          params = {
            { "db", "mongostore.Database", "the database the models' collections are in" },
            { "models", "mongostore.Model[]", "the models to bind to it" },
            { "opts", "{ indexes: boolean? }?", "`indexes = false`: create no index" },
          },
          returns = { { "registry", "mongostore.Registry", "the models bound, their indexes created" } },
          raises = "a `db` or `models` of the wrong type, an unknown option",
          desc = MODEL_FAILS .. ", code one of the document API's (a refused index)." },
        { class = "mongostore.Registry",
          desc = "Binds models to a database (a model is bound to one registry at a time) and runs their "
            .. "transactions." },
        { method = "model", of = "mongostore.Registry",
          params = { { "name", "string", "a model's name" } },
          returns = { { "Model", "mongostore.Model?", "the model of that name, if the registry has it" } } },
        { class = "mongostore.ModelOptions",
          desc = "The options of the model's calls. Each call takes only the ones its reference lists (`Model:get`: "
            .. "session, unscoped); any other key raises naming the call and the key (`Model:get: unknown option "
            .. "ordered`).",
          fields = {
            { "session", "mongostore.Session|mongostore.ModelSession?", "run the call in this session (and its "
              .. "transaction): the `tx` of `registry:transaction`, or a `registry:session()`" },
            { "validate", "boolean?", "false: skip the checks of this write", default = "the model's" },
            { "unscoped", "boolean?", "see soft-deleted documents too", default = "false" },
            { "hard", "boolean?", "the deletes (`Model:delete`, `doc:delete`, `q:delete`): remove the document "
              .. "rather than mark it", default = "false" },
            { "ordered", "boolean?", "`insert_many`, `bulk_write`: stop at the first failure", default = "true" },
          } },
        { fn = "options", module = "mongostore.model",
          params = { { "t", "mongostore.ModelOptions", "the options" } },
          returns = { { "opts", "mongostore.ModelOptions", "marked, so it can go among an update's pieces" } },
          raises = "a `t` that is not a table, a key other than session, validate, unscoped",
          desc = "The calls whose arguments are a list of update pieces (`Model:update`, `Model:upsert`, "
            .. "`q:update`) take their options this way; each checks them against its own (`q:update` takes "
            .. "session, validate).",
          example = [[
Article:update(id, ops.inc { views = 1 }, model.options { session = tx })]] },
        { class = "mongostore.ModelFailureDetail", parent = "mongostore.ErrorDetail",
          desc = "The fourth value of a failed model call, when there is something to say: the document API's "
            .. "detail of a server failure (`server_code`, `labels`) with the model's own facts added.",
          fields = {
            { "errors", "mongostore.ValueError[]?", "`validation`: each value refused, by its field path (and its "
              .. "op's index in a `bulk_write`)" },
            { "failed", "mongostore.ModelItemFailure[]?", "`bulk_save`: the documents not written (each with "
              .. "its `doc`); `bulk_write` refused as `validation`: each op refused" },
            { "written", "integer?", "`bulk_save`: how many documents were written" },
            { "found", "integer?", "`stale`: the revision the stored document is at" },
          } },
        { class = "mongostore.ValueError",
          desc = "One value a validation refused.",
          fields = {
            { "field", "string", "its path (`tags[2]`, `author.name`)" },
            { "message", "string", "what is wrong with it" },
            { "index", "integer?", "`bulk_write`: the index of its op" },
          } },
        { class = "mongostore.ModelItemFailure",
          desc = "One item of a model's batch call that failed, in the shape every batch result shares.",
          fields = {
            { "index", "integer", "its index in the list given (1-based)" },
            { "message", "string", "what was being done, and what went wrong" },
            { "code", "string", "`validation`, `duplicate`, `stale`, `not_found`, `server`, ..." },
            { "detail", "mongostore.ModelFailureDetail?", "`validation`: its `errors`; a server's refusal: its "
              .. "`server_code`; `stale`: the revision `found`" },
            { "doc", "mongostore.Document?", "`bulk_save`: the document, unchanged" },
          } },
        { fn = "is_document", module = "mongostore.model",
          params = { { "x", "any", "any value" } },
          returns = { { "yes", "boolean", "whether `x` is a document of a model (tracked or new)" } } },
        { fn = "snapshot", module = "mongostore.model",
          params = { { "doc", "table", "a document" } },
          returns = { { "snap", "table?", "what it looked like when last read or written; nil for one not from "
            .. "a tracked read" } },
          desc = "For tools and specs: a save sends the difference between this and the document." },
      },
    },
    {
      title = "Documents",
      entries = {
        { class = "mongostore.Model",
          desc = [[
A model, from `model.define`. Its class methods are called with `:`
(`Article:get(id)`); `Article(fields)` is `Article:new(fields)`.]] },
        { method = "new", of = "mongostore.Model",
          params = { { "t", "table?", "the fields (`id` is taken as `_id`)" } },
          returns = { { "doc", "mongostore.Document", "the table itself, with the model's metatable and its defaults: "
            .. "new, nothing sent" } },
          raises = "a `t` that is not a table, or a stored document" },
        { method = "insert", of = "mongostore.Model",
          params = { { "t", "table", "the fields" }, MOPTS "session, validate" },
          returns = { { "doc", "mongostore.Document", "stored: an ObjectId `_id` when it had none, `created_at`, "
            .. "`updated_at`, the revision at 0" } },
          desc = "Every insert path (this, a save of a new document, `insert_many`, `bulk_save`, `bulk_write`'s "
            .. "`insert_one`) prepares a document the same way: the defaults, the check, an `id` required when "
            .. "the model's ids are not ObjectIds (`validation`, field `id`: the server would make one up), the "
            .. "transaction's journal, then the model's fields. "
            .. MODEL_FAILS .. ": `validation` (nothing sent), `duplicate`, the document API's codes; on a "
            .. "failure the document is as it was, still new.",
          example = [[
local a = assert(Article:insert { title = "Draft" })]] },
        { method = "get", of = "mongostore.Model",
          params = { { "id", "any", "the `_id`, cast to the declared `_id` type (see below)" },
                     MOPTS "session, unscoped" },
          returns = { { "doc", "mongostore.Document?", "tracked; nil when there is none (or it is soft-deleted)" } },
          desc = MODEL_FAILS .. ": `invalid`, the document API's codes. " .. [[
Every call that takes an id (`get`, `update`, `delete`, `restore`, `exists`)
casts it to the declared type of `_id` where the conversion is exact: 24 hex
digits to an ObjectId (the default `_id`), an exact decimal string to an
integer, an ISO time with its zone to a date. Anything else, a table above
all (`{"$gt": ""}` from a client), is `invalid` with a message naming its
type, and nothing is sent; so is a missing id (nil or null).]] },
        { method = "delete", of = "mongostore.Model",
          params = { { "id", "any", "the `_id`, cast as `get` casts it" },
                     MOPTS "session, hard" },
          returns = { { "ok", "true", "soft-deleted (or removed with `hard`)" } },
          desc = MODEL_FAILS .. ": `not_found` (none, or soft-deleted already), `invalid`, the document API's "
            .. "codes. One round trip; nothing is loaded." },
        { method = "restore", of = "mongostore.Model",
          params = { { "id", "any", "the `_id`, cast as `get` casts it" },
                     MOPTS "session" },
          returns = { { "doc", "mongostore.Document", "the document restored, tracked" } },
          raises = "a model without a `deleted_at` field",
          desc = MODEL_FAILS .. ": `not_found` (no soft-deleted document with that id), `invalid`, the document "
            .. "API's codes. Clears `deleted_at`, bumps the revision and sets `updated_at`, in one round trip." },
        { method = "exists", of = "mongostore.Model",
          params = { { "id", "any", "the `_id`, cast as `get` casts it" }, MOPTS "session, unscoped" },
          returns = { { "yes", "boolean", "whether a document has it (soft-deleted ones only when unscoped)" } },
          desc = MODEL_FAILS .. ": `invalid`, the document API's codes." },
        { method = "find", of = "mongostore.Model",
          params = { { "q", "mongostore.Cond|table?", "the query (nil: every document)" } },
          returns = { { "q", "mongostore.Query", "nothing is sent until a reading call" } },
          desc = [[
A plain table `q` compares values as data: a value holding an operator key
(`{ password = { ["$ne"] = null } }`), a regex, or a top-level operator
(`$or`, `$where`, `$expr`, ...) makes the query `invalid`, returned by the
call that runs it, with nothing sent. Values are cast to the field's declared
type where exact (`"2"` to an integer field, 24 hex digits to an ObjectId
field, ISO text with its zone to a date field) and `invalid` otherwise; the
operands of `Q` conditions are cast the same way. Operators come from `Q` or
from `model.trusted`.]],
          example = [[
local top = assert(Article:find(Q.views:gte(10)):sort { { "views", -1 } }:limit(10):all())]] },
        { method = "count", of = "mongostore.Model",
          params = { { "q", "mongostore.Cond|table?", "the query" }, MOPTS "session, unscoped" },
          returns = { { "n", "integer", "how many documents match (soft-deleted ones not, unless unscoped)" } },
          desc = MODEL_FAILS .. "." },
        { method = "distinct", of = "mongostore.Model",
          params = { { "field", "string", "the field (a dotted path)" }, { "q", "mongostore.Cond|table?", "the query" },
                     MOPTS "session, unscoped" },
          returns = { { "values", "any[]", "the distinct values among the matching documents" } },
          desc = MODEL_FAILS .. "." },
        { method = "lean", of = "mongostore.Model",
          params = { { "q", "mongostore.Cond|table?", "the query" }, MOPTS "session, unscoped" },
          returns = { { "docs", "table[]", "the documents as read, untracked: plain tables, no snapshot" } },
          desc = "An untracked read: saving one of them (through `Model:new`) tries an insert and fails "
            .. "`duplicate`, saying why; `Model:hydrate` adopts one. " .. MODEL_FAILS .. "." },
        { method = "hydrate", of = "mongostore.Model",
          params = { { "raw", "table", "a stored document (from `lean`, or any read)" } },
          returns = { { "doc", "mongostore.Document", "the same table, tracked as it is now" } },
          raises = "a `raw` that is not a table or has no `_id`" },
        { method = "aggregate", of = "mongostore.Model",
          params = { { "pipeline", "table[]", "the stages" }, MOPTS "session, unscoped" },
          returns = { { "docs", "table[]", "the results, as read" } },
          desc = "The soft-delete scope is the first stage (`$match`), unless unscoped. " .. MODEL_FAILS .. "." },
        { class = "mongostore.Document",
          desc = [[
A model's document: a table of its fields with the model's metatable. `id` is
`_id`, `is_new` is true until it is stored (read-only); methods cannot be
field names. A copy (`track.copy`, a table built by hand) has no snapshot:
saving it tries an insert.]] },
        { method = "save", of = "mongostore.Document",
          params = { MOPTS "session, validate" },
          returns = { { "doc", "mongostore.Document", "itself, in sync: the revision bumped, `updated_at` set, the "
            .. "snapshot taken" } },
          raises = "a change to the id or to an immutable field (`created_at`)",
          desc = [[
A new document (or one with no snapshot) is inserted. A tracked one sends the
difference from its snapshot in one `update` guarded by its revision (and the
soft-delete scope), and nothing when nothing changed. ]] .. MODEL_FAILS .. [[
: `stale` (the document is at another revision: reload it), `not_found` (it
is gone, or soft-deleted by someone else), `validation`, `duplicate` (for a
document with no snapshot the message says so), the document API's codes. On
a failure nothing in memory changes.]],
          example = [[
a.title = "Final"; a.tags[#a.tags + 1] = "news"
assert(a:save())]] },
        { method = "insert", of = "mongostore.Document",
          params = { MOPTS "session, validate" },
          returns = { { "doc", "mongostore.Document", "itself, stored" } },
          raises = "a document stored already",
          desc = "As `Model:insert`, for a document made with `Model:new`. " .. MODEL_FAILS .. "." },
        { method = "changes", of = "mongostore.Document", params = {},
          returns = { { "update", "table", "what `save` would send: `{ [\"$set\"] = ..., [\"$unset\"] = ... }`, "
            .. "`{}` when nothing changed (the revision and `updated_at` are added at the save)" } } },
        { method = "delete", of = "mongostore.Document",
          params = { MOPTS "session, hard" },
          returns = { { "ok", "true", "deleted (soft: `deleted_at` set, the revision bumped)" } },
          raises = "a document that is not stored",
          desc = "`true` only when this call deleted it. A document deleted already (soft-deleted as last read or "
            .. "written, or removed for good) is not written again: the call fails `not_found` (\"deleted "
            .. "already\") and `deleted_at` and the revision stay as they were; `{ hard = true }` still removes a "
            .. "soft-deleted one. A copy another writer deleted or moved on fails `not_found` or `stale`. "
            .. MODEL_FAILS .. ": `stale`, `not_found`, the document API's codes." },
        { method = "reload", of = "mongostore.Document",
          params = { MOPTS "session, unscoped" },
          returns = { { "doc", "mongostore.Document", "itself, as stored now: pending changes dropped" } },
          desc = MODEL_FAILS .. ": `not_found`, the document API's codes." },
        { method = "to_table", of = "mongostore.Document", params = {},
          returns = { { "t", "table", "a deep copy of its fields, a plain table" } } },
      },
    },
    {
      title = "Taking client values",
      intro = [[
A web handler hands a model what a client sent: an id from the path, a
decoded JSON body, a query string. A model takes all of it as data, whichever
decoder made the tables (`mongostore.json`, `mongostore.ejson`, lua-cjson):

- an id is cast to the declared `_id` type where the conversion is exact (24
  hex digits to an ObjectId, `"2"` to an integer) and is otherwise `invalid`,
  so `{"$gt": ""}` never reaches the server as an id;
- a plain-table filter compares values: a value holding an operator key or a
  regex, and a top-level operator (`$or`, `$where`, `$expr`), are `invalid`
  (nothing is sent), and values are cast to the field's type where exact
  (`"2"` finds page 2; ISO text with its zone is a date);
- a plain update table sets declared fields only: an operator key or value is
  `invalid`, and so is any path that is not a declared field, the id, an
  immutable field, or a field the model keeps (`created_at`, `updated_at`,
  the revision, `deleted_at`), through any operator (`$rename`'s destination
  too);
- `$where`, `$function` and `$accumulator` are refused everywhere, even in
  code.

Every refusal is `nil, message, "invalid"`, whose message names the field and the
type it got, never the value; answer it with a 400. Operators are written in
code with `Q` and `ops`, or with a table marked `model.trusted`. Never mark a
table that came from a client.

```lua
-- PATCH /users/{id}: a client may change its name and note, nothing else
local body = mongostore.json.decode(ngx.req.get_body_data() or "")
if type(body) ~= "table" then return ngx.exit(400) end
local user, err, code = User:update(ngx.var.user_id, { name = body.name, note = body.note })
if code == "invalid" or code == "validation" then
  ngx.status = 400
  return ngx.say(mongostore.json.encode({ error = err }))
elseif not user then
  return ngx.exit(code == "not_found" and 404 or 503)
end
```]],
      entries = {
        { fn = "trusted", module = "mongostore.model",
          params = { { "t", "table", "a filter or an update written as code, operators and all" } },
          returns = { { "t", "table", "t itself, marked" } },
          raises = "a `t` that is not a table",
          desc = [[
Plain tables given to a model are data: a filter's values are compared (an
operator key in a value is `invalid`), an update's keys are fields to set.
Operators come from `Q` and `ops`, or from a table marked with `trusted`,
which is sent as written. Mark only tables your code writes, never one a
client sent. Even a trusted table is refused (`invalid`) when it holds
`$where`, `$function` or `$accumulator`, and a trusted update still cannot
write the id, an immutable field or the ones the model keeps.]],
          example = [[
local n = assert(Article:find(model.trusted { views = { ["$mod"] = { 2, 0 } } }):count())]] },
      },
    },
    {
      title = "Queries",
      entries = {
        { class = "mongostore.Query",
          desc = "The documents a query matches, from `Model:find(q)`: chain `sort`, `limit`, `skip`, `unscoped`, "
            .. "`session`, then read or write. Failures as `" .. "nil, message, code, detail" .. "`." },
        { method = "sort", of = "mongostore.Query",
          params = { { "spec", "table", "a list of pairs `{ { \"views\", -1 } }`, or a table of one key" } },
          returns = { { "q", "mongostore.Query", "itself" } } },
        { method = "limit", of = "mongostore.Query", params = { { "n", "integer", "at most this many" } },
          returns = { { "q", "mongostore.Query", "itself" } } },
        { method = "skip", of = "mongostore.Query", params = { { "n", "integer", "skip this many first" } },
          returns = { { "q", "mongostore.Query", "itself" } } },
        { method = "unscoped", of = "mongostore.Query",
          params = { { "name", "string?", "`\"soft_delete\"` (the only scope)" } },
          returns = { { "q", "mongostore.Query", "itself, seeing soft-deleted documents too" } } },
        { method = "session", of = "mongostore.Query",
          params = { { "s", "mongostore.Session|mongostore.ModelSession", "the session" } },
          returns = { { "q", "mongostore.Query", "itself, its calls in the session" } } },
        { method = "all", of = "mongostore.Query", params = { MOPTS "session" },
          returns = { { "docs", "mongostore.Document[]", "every match, tracked" } } },
        { method = "first", of = "mongostore.Query", params = { MOPTS "session" },
          returns = { { "doc", "mongostore.Document?", "the first match; nil when none" } } },
        { method = "one", of = "mongostore.Query", params = { MOPTS "session" },
          returns = { { "doc", "mongostore.Document", "the one match" } },
          desc = MODEL_FAILS .. ": `not_found` when none matches, `invalid` when more than one does." },
        { method = "lean", of = "mongostore.Query", params = { MOPTS "session" },
          returns = { { "docs", "table[]", "every match as read, untracked" } } },
        { method = "count", of = "mongostore.Query", params = { MOPTS "session" },
          returns = { { "n", "integer", "how many match (within skip and limit)" } } },
        { method = "distinct", of = "mongostore.Query",
          params = { { "field", "string", "the field" }, MOPTS "session" },
          returns = { { "values", "any[]", "its distinct values among the matches" } } },
        { method = "each", of = "mongostore.Query", params = { MOPTS "session" },
          returns = { { "iter", "fun(): mongostore.Document", "for a generic `for`, tracked documents one at a "
            .. "time" } },
          desc = "A failure raises inside the loop, as `cursor:each`." },
        { method = "update", of = "mongostore.Query",
          params = { { "...", "mongostore.Op|table|mongostore.ModelOptions", "the update's pieces (an Op, or a "
            .. "table of fields to set), and `model.options` (session, validate)" } },
          returns = {
            { "n", "integer", "documents modified" },
            { "result", "{ matched: integer, modified: integer }", "the counts" },
          },
          desc = "Every match, none loaded; the revision bumped and `updated_at` set on each. " .. MODEL_FAILS
            .. ": `invalid` (as `Model:update`; an unscoped query may also clear `deleted_at`: a restore), "
            .. "`validation` (nothing sent), the document API's codes.",
          example = [[
local n = assert(Article:find(Q.views:gte(1)):update(ops.inc { views = 10 }))]] },
        { method = "delete", of = "mongostore.Query",
          params = { MOPTS "session, hard" },
          returns = { { "n", "integer", "documents deleted (soft, or removed with `hard`)" } } },
      },
    },
    {
      title = "Atomic updates",
      entries = {
        { method = "update", of = "mongostore.Model",
          params = {
            { "id", "any", "the document's id" },
            { "...", "mongostore.Op|table|mongostore.ModelOptions", "the update's pieces, and `model.options` "
              .. "(session, validate, unscoped)" },
          },
          returns = { { "doc", "mongostore.Document", "the document after the update, tracked (one round trip: "
            .. "`findAndModify`)" } },
          desc = "Every supplied value is checked against its field first. " .. MODEL_FAILS
            .. ": `not_found` (no such document, or soft-deleted), `invalid`, `validation` (nothing sent), "
            .. "`duplicate`, the document API's codes. " .. [[
A plain table sets declared fields only (`$set`): a key or a value holding an
operator is `invalid`. Operators come from `ops` or `model.trusted`. Whatever
the route, every path of every operator (`$rename`'s destinations too) must
be a declared field, and the id, immutable fields and the fields the model
keeps (`created_at`, `updated_at`, the revision, `deleted_at`) are never
written: `invalid`, nothing sent. Also `invalid`: one path given twice, or
with its parent.]],
          example = [[
local a2 = assert(Article:update(a.id, ops.inc { views = 1 }, ops.push { tags = "featured" }, { title = "v2" }))]] },
        { method = "upsert", of = "mongostore.Model",
          params = {
            { "q", "mongostore.Cond|table", "which document; its equalities are copied into an inserted one" },
            { "...", "mongostore.Op|table|mongostore.ModelOptions", "the update's pieces, and `model.options` "
              .. "(session, validate, unscoped)" },
          },
          returns = { { "doc", "mongostore.Document", "the document after the update: inserted when none matched "
            .. "(revision 1, `created_at`, the defaults of the fields neither the update nor the filter gives)" } },
          desc = MODEL_FAILS .. ": as `Model:update`; `q` is taken as `Model:find` takes it." },
        { field = "Q", module = "mongostore.model", type = "mongostore.QueryFields",
          desc = "`Q.title`, `Q[\"author.name\"]`: a field, whose methods make conditions; `id` is `_id`." },
        { class = "mongostore.QueryFields",
          desc = "The type of `model.Q` (mongostore.query's): any key is a field path." },
        { fn = "Q.and_", module = "mongostore.model",
          params = { { "...", "mongostore.Cond|table", "conditions" } },
          returns = { { "c", "mongostore.Cond", "all of them" } } },
        { fn = "Q.or_", module = "mongostore.model",
          params = { { "...", "mongostore.Cond|table", "conditions (at least one)" } },
          returns = { { "c", "mongostore.Cond", "any of them" } } },
        { fn = "Q.not_", module = "mongostore.model",
          params = { { "c", "mongostore.Cond|table", "a condition" } },
          returns = { { "c", "mongostore.Cond", "its negation" } } },
        { class = "mongostore.Cond", desc = "A condition: `tostring` shows the filter it makes." },
        { class = "mongostore.Field", desc = "A field path of `Q`, whose methods make conditions." },
        { method = "eq", of = "mongostore.Field", params = { { "v", "any", "the value" } },
          returns = { { "c", "mongostore.Cond", "equal (`mongostore.null`: null or missing)" } } },
        { method = "ne", of = "mongostore.Field", params = { { "v", "any", "the value" } },
          returns = { { "c", "mongostore.Cond", "`$ne`" } } },
        { method = "gt", of = "mongostore.Field", params = { { "v", "any", "the bound" } },
          returns = { { "c", "mongostore.Cond", "`$gt`" } } },
        { method = "gte", of = "mongostore.Field", params = { { "v", "any", "the bound" } },
          returns = { { "c", "mongostore.Cond", "`$gte`" } } },
        { method = "lt", of = "mongostore.Field", params = { { "v", "any", "the bound" } },
          returns = { { "c", "mongostore.Cond", "`$lt`" } } },
        { method = "lte", of = "mongostore.Field", params = { { "v", "any", "the bound" } },
          returns = { { "c", "mongostore.Cond", "`$lte`" } } },
        { method = "in_", of = "mongostore.Field", params = { { "list", "any[]", "the values" } },
          returns = { { "c", "mongostore.Cond", "`$in`" } } },
        { method = "nin", of = "mongostore.Field", params = { { "list", "any[]", "the values" } },
          returns = { { "c", "mongostore.Cond", "`$nin`" } } },
        { method = "exists", of = "mongostore.Field",
          params = { { "b", "boolean?", "false: missing", default = "true" } },
          returns = { { "c", "mongostore.Cond", "`$exists`" } } },
        { method = "prefix", of = "mongostore.Field", params = { { "s", "string", "the prefix, taken literally" } },
          returns = { { "c", "mongostore.Cond", "a `$regex` anchored at the start" } } },
        { method = "regex", of = "mongostore.Field",
          params = { { "pattern", "string|mongostore.Regex", "the pattern" }, { "flags", "string?", "its options" } },
          returns = { { "c", "mongostore.Cond", "`$regex`" } } },
        { method = "all_", of = "mongostore.Field", params = { { "list", "any[]", "the values" } },
          returns = { { "c", "mongostore.Cond", "`$all`" } } },
        { method = "size", of = "mongostore.Field", params = { { "n", "integer", "the length" } },
          returns = { { "c", "mongostore.Cond", "`$size`" } } },
        { method = "elem_match", of = "mongostore.Field",
          params = { { "c", "mongostore.Cond|table", "a condition on one item (its paths are the item's)" } },
          returns = { { "c", "mongostore.Cond", "`$elemMatch`" } } },
        { field = "ops", module = "mongostore.model", type = "mongostore.Ops",
          desc = "The update operators: each takes a table of path = value and returns an Op." },
        { class = "mongostore.Ops", desc = "The type of `model.ops`." },
        { class = "mongostore.Op", desc = "One update operator with its paths: `tostring` shows it." },
        { fn = "ops.set", module = "mongostore.model", params = { { "fields", "table", "path = value" } },
          returns = { { "op", "mongostore.Op", "`$set`" } } },
        { fn = "ops.unset", module = "mongostore.model",
          params = { { "fields", "table", "a list of paths, or path = true" } },
          returns = { { "op", "mongostore.Op", "`$unset`" } } },
        { fn = "ops.inc", module = "mongostore.model", params = { { "fields", "table", "path = number" } },
          returns = { { "op", "mongostore.Op", "`$inc`" } } },
        { fn = "ops.mul", module = "mongostore.model", params = { { "fields", "table", "path = number" } },
          returns = { { "op", "mongostore.Op", "`$mul`" } } },
        { fn = "ops.min", module = "mongostore.model", params = { { "fields", "table", "path = value" } },
          returns = { { "op", "mongostore.Op", "`$min`" } } },
        { fn = "ops.max", module = "mongostore.model", params = { { "fields", "table", "path = value" } },
          returns = { { "op", "mongostore.Op", "`$max`" } } },
        { fn = "ops.push", module = "mongostore.model",
          params = { { "fields", "table", "path = value (or `ops.each{...}`)" } },
          returns = { { "op", "mongostore.Op", "`$push`" } } },
        { fn = "ops.add_to_set", module = "mongostore.model",
          params = { { "fields", "table", "path = value (or `ops.each{...}`)" } },
          returns = { { "op", "mongostore.Op", "`$addToSet`" } } },
        { fn = "ops.pull", module = "mongostore.model",
          params = { { "fields", "table", "path = value or condition" } },
          returns = { { "op", "mongostore.Op", "`$pull`" } } },
        { fn = "ops.pop", module = "mongostore.model",
          params = { { "fields", "table", "path = 1 (last) or -1 (first)" } },
          returns = { { "op", "mongostore.Op", "`$pop`" } } },
        { fn = "ops.set_on_insert", module = "mongostore.model", params = { { "fields", "table", "path = value" } },
          returns = { { "op", "mongostore.Op", "`$setOnInsert` (for `upsert`)" } } },
        { fn = "ops.current_date", module = "mongostore.model",
          params = { { "fields", "table", "path = true, \"date\" or \"timestamp\"" } },
          returns = { { "op", "mongostore.Op", "`$currentDate`" } } },
        { fn = "ops.rename", module = "mongostore.model",
          params = { { "fields", "table", "path = its new path" } },
          returns = { { "op", "mongostore.Op", "`$rename` (both paths must be declared fields)" } } },
        { fn = "ops.each", module = "mongostore.model",
          params = { { "list", "any[]", "the values" },
                     { "opts", "{ position: integer?, slice: integer?, sort: any? }?", "push only" } },
          returns = { { "each", "table", "several values for `push` and `add_to_set` (`$each`)" } } },
      },
    },
    {
      title = "Bulk writes",
      entries = {
        { method = "insert_many", of = "mongostore.Model",
          params = { { "list", "table[]", "documents (or tables of fields)" }, MOPTS "session, validate, ordered" },
          returns = { { "result", "mongostore.ModelInsertManyResult", "the documents inserted and the failures" } },
          raises = "an item that is not a table, or a stored document",
          desc = [[
Every document is checked first and an invalid one is never sent: it is one
of `result.errors` (code `validation`, the values refused in `detail.errors`)
beside the server's refusals (`detail.server_code`), each by its index in
`list`. Unordered (`ordered = false`) it
attempts every valid document; ordered it stops at the first failure. The
valid ones go in one `insert_many`. ]] .. MODEL_FAILS .. [[ (a failure of the
whole call).]] },
        { class = "mongostore.ModelInsertManyResult",
          desc = "What `Model:insert_many` returns.",
          fields = {
            { "inserted", "mongostore.Document[]", "the documents stored, in order, tracked" },
            { "errors", "mongostore.ModelItemFailure[]", "the documents not stored, by index (an empty array "
              .. "when none)" },
          } },
        { method = "bulk_save", of = "mongostore.Model",
          params = { { "docs", "mongostore.Document[]", "documents of this model" }, MOPTS "session, validate" },
          returns = { { "n", "integer", "documents written (unchanged ones send nothing)" } },
          raises = "an item that is not a document of this model",
          desc = [[
The delta of every changed document (and the new ones) in one unordered
`bulk_write`, one round trip; when fewer updates matched than were sent, one
read tells the stale ones apart. Each update also sets `_bulk` to a token
unique to that op of that call, and only that token says an update was
written (a revision or an `updated_at` can be another writer's, in the same
millisecond): a copy another writer moved on is `stale` every time. Tracked
reads drop `_bulk` and saves never send it; `lean` shows it, and a model may
not declare a field of that name. The writes are independent: the written
documents are in sync in memory (revision, snapshot), the others as they
were, listed in `detail.failed` (each a
[`ModelItemFailure`](#type-modelitemfailure) with its `doc`). ]] .. MODEL_FAILS
  .. ": the first failure's code, `detail.failed`, `detail.written`." },
        { method = "bulk_write", of = "mongostore.Model",
          params = { { "list", "mongostore.ModelBulkOp[]", "ops from `model.update_one` and the others" },
                     MOPTS "session, validate, unscoped, ordered" },
          returns = { { "result", "mongostore.BulkWriteResult", "the document API's result" } },
          raises = "an item that is not a model op, an unknown or immutable field, an insert of a stored document",
          desc = "Each op gets the scope, the revision bump and `updated_at` (an upsert `created_at`); a delete of "
            .. "a soft-deleting model marks; an insert is prepared as `Model:insert` prepares it, and the "
            .. "documents it inserted are tracked (a refused one, or one an ordered bulk never sent, is left as "
            .. "it was). The server's refusals are `result.errors` ([`WriteError`](documents.md#type-writeerror)). "
            .. MODEL_FAILS .. ": `validation` (any op: nothing sent; `detail.errors` each value by its op's "
            .. "index, `detail.failed` each op), `invalid`, the document API's codes." },
        { class = "mongostore.ModelBulkOp", desc = "One op of `Model:bulk_write`." },
        { fn = "insert_one", module = "mongostore.model", params = { { "doc", "table", "the document" } },
          returns = { { "op", "mongostore.ModelBulkOp", "an insert" } } },
        { fn = "update_one", module = "mongostore.model",
          params = { { "q", "mongostore.Cond|table", "which document" },
                     { "...", "mongostore.Op|table", "the update's pieces" } },
          returns = { { "op", "mongostore.ModelBulkOp", "an update of the first match" } },
          example = [[
assert(Article:bulk_write { model.update_one(Q.title:eq("bulk 0"), ops.inc { views = 1 }) })]] },
        { fn = "update_many", module = "mongostore.model",
          params = { { "q", "mongostore.Cond|table", "which documents" },
                     { "...", "mongostore.Op|table", "the update's pieces" } },
          returns = { { "op", "mongostore.ModelBulkOp", "an update of every match" } } },
        { fn = "upsert_one", module = "mongostore.model",
          params = { { "q", "mongostore.Cond|table", "which document" },
                     { "...", "mongostore.Op|table", "the update's pieces" } },
          returns = { { "op", "mongostore.ModelBulkOp", "an update, inserting when none matches" } } },
        { fn = "delete_one", module = "mongostore.model",
          params = { { "q", "mongostore.Cond|table", "which document" },
                     { "opts", "{ hard: boolean? }?", "hard: remove rather than mark" } },
          returns = { { "op", "mongostore.ModelBulkOp", "a delete of the first match" } } },
        { fn = "delete_many", module = "mongostore.model",
          params = { { "q", "mongostore.Cond|table", "which documents" },
                     { "opts", "{ hard: boolean? }?", "hard: remove rather than mark" } },
          returns = { { "op", "mongostore.ModelBulkOp", "a delete of every match" } } },
      },
    },
    {
      title = "Transactions",
      entries = {
        { method = "transaction", of = "mongostore.Registry",
          params = {
            { "fn", "fun(tx: mongostore.Session): any", "the work; pass `{ session = tx }` to every call inside" },
            { "opts", "mongostore.ModelTransactionOptions?", "independent, and `db:transaction`'s options" },
          },
          returns = { { "ok", "true", "committed" }, { "values", "any", "then what `fn` returned" } },
          raises = "what `fn` raised (the transaction aborted, memory put back first)",
          desc = [[
`db:transaction` underneath: it commits when `fn` returns and runs `fn` again
on a transient error (a write conflict), so `fn` must be safe to run twice.
Before each new run and when the transaction aborts, every document written
inside is put back in memory (its revision, timestamps, snapshot, new and
deleted flags; the changes you made stay pending), so a retried save sends its
delta again. A failure raised with `assert` is retried too when an operation
of the transaction failed transiently (the session knows). Transactions do not
nest (MongoDB has no savepoints): called inside a running one it fails
`transaction` unless `opts.independent`, which commits on its own (an audit
record that must survive the outer abort). ]] .. MODEL_FAILS .. [[
: `transaction`, or what `fn` returned, or `db:transaction`'s codes.]],
          example = [[
local ok, err, code = registry:transaction(function(tx)
  landing.tags[#landing.tags + 1] = "promoted"
  assert(landing:save { session = tx })
  return true
end)]] },
        { class = "mongostore.ModelTransactionOptions", parent = "mongostore.TransactionOptions",
          desc = "The options of `registry:transaction`; an unknown key raises.",
          fields = {
            { "independent", "boolean?", "run as a separate transaction even inside another", default = "false" },
          } },
        { method = "session", of = "mongostore.Registry", params = {},
          returns = { { "ms", "mongostore.ModelSession", "for transactions run by hand: no retry" } },
          desc = MODEL_FAILS .. ": `unavailable` on a server without sessions." },
        { class = "mongostore.ModelSession",
          desc = "A session of `registry:session()`; `ms.session` is its `mongostore.Session`, for the document "
            .. "API. Its abort (and a close that aborts) puts the documents written in it back in memory.",
          fields = { { "session", "mongostore.Session", "the document API's session" } } },
        { method = "start_transaction", of = "mongostore.ModelSession",
          params = { { "opts", "mongostore.StartTransactionOptions?", "the transaction's options" } },
          returns = { { "ok", "true", "started" } } },
        { method = "commit", of = "mongostore.ModelSession", params = {},
          returns = { { "ok", "true", "committed" } } },
        { method = "abort", of = "mongostore.ModelSession", params = {},
          returns = { { "ok", "true", "aborted, memory put back" } } },
        { method = "in_transaction", of = "mongostore.ModelSession", params = {},
          returns = { { "yes", "boolean", "whether a transaction is open" } } },
        { method = "close", of = "mongostore.ModelSession", params = {},
          returns = { { "ok", "true", "ended (aborting an open transaction)" } } },
      },
    },
  },
}

------------------------------------------------------------------------
-- records (mongostore.records)

-- What a records call returns when it fails: the one failure shape, the facts in detail.
local function RFAILS(codes)
  return "Fails with `nil, message, code, detail` (`detail` a [`RecordFailureDetail`](#type-recordfailuredetail) "
    .. "or nil), code " .. codes
end
local DRIVER = "the document API's `network`, `timeout`, `server`, `unavailable`"

api.pages[#api.pages + 1] = {
  file = "records",
  title = "Records",
  module = "mongostore.records",
  summary = "`mongostore.records`: a store of immutable record graphs: integer sids, content ids and dedup, "
    .. "embedded children and refs by sid, lineage, store timestamps and as-of, keyset pages, transaction "
    .. "modes, writer leases and fsck, schema fingerprints.",
  intro = [[
`local records = require "mongostore.records"`. A record type is declared
once with `records.define` (its fields, embedded children, refs to other
types, dedup rule and indexes) and a store is opened on a database with
`records.open(db, { types = { ... } })`, which creates the collections'
indexes and checks the types' schema fingerprints. A record is immutable:
`rs:save` stores a whole graph (the record, its children, the records its
refs point to) and gives back the root's sid; `rs:replace` stores a successor
in the same lineage. Stored records come back as plain tables of their
fields, refs loaded as records, with the store fields `_sid`, `_cid`, `_ts`,
`_lin`, `_prev`, `_next`, `_role` ([`Record`](#type-record)).

**Storage.** `opts.prefix` (default `"records."`) names every collection of a
store: `<prefix><type name>` holds the records of one type (`records.book`),
`<prefix>_counters` the sid counter (`{ _id = "sid", n = <last allocated> }`),
`<prefix>_meta` the store's metadata. A record's document has its sid as
`_id` (an int64), its declared fields at the top level, each embedded child
list as an array of sub-documents under its name, a ref as the referenced
record's sid (a list ref as an array of sids), and the store fields:

| field | what |
| --- | --- |
| `_cid` | the content id: SHA-256 (64 hex digits) of the canonical encoding |
| `_role` | `"main"` (saved or replaced by a caller: a root of fsck's walk) or `"dep"` (reached through a ref) |
| `_lin` | the lineage: the sid of its first record |
| `_prev` | the predecessor's sid (absent on a lineage's first record) |
| `_next` | the successor's sid (absent on the latest) |
| `_nts` | the successor's store timestamp, beside `_next` (what `only_latest` with `as_of` reads) |
| `_ts` | the store timestamp, in store units (nanoseconds // `timestamp_resolution`), with `store_timestamps` |
| `_w` | the token of the writer lease that wrote it |
| `_refs` | every record it refers to, across types, as `{ type name, sid }` pairs (fsck's walk) |

`<prefix>_meta` holds `{ _id = "schema:<type>", fingerprint =, shape = }`
per type (stamped at the first open), `{ _id = "page_key", key = }` (the key
that signs page cursors, made once per store), `{ _id = "fsck", holder =,
expires =, gen = }` (the exclusive fsck lease; `gen` counts finished passes)
and `{ _id = "writer:<token>", expires =, gen = }` per writing store handle.
Each type's collection has a `_cid` index (unique unless `dedup = "none"`),
`_lin`, `_ts` (with timestamps) and the declared `indexes`, each with `_id`
last. Sids come from one `$inc` of the counter per save, for the whole
graph, outside any transaction (a counter written inside every transaction
would make them all conflict): they are never reused, and a failed save
leaves a gap.

**Transaction modes.** `opts.transactions = "auto"` (the default) asks the
server: a replica set opens in `"transactions"` mode, a standalone in
`"degraded"` mode with one warning through `opts.log`; `"require"` refuses a
standalone (`unavailable`, saying why); `"never"` opens degraded on any
server. In transaction mode each save or replace is one transaction (run
again on a duplicate key, when another process stored the same content
meanwhile), so a failure anywhere in a graph leaves nothing of it, and
`rs:transaction` groups several. Degraded, a graph is written bottom-up,
one insert per record, dependencies before the records that refer to them
and the root last; a replace writes the successor as a dependency, links it
from its predecessor, then makes it main. So a crash (or `kill -9`) leaves
only complete records that no main record reaches (or a linked successor
still marked dep, which `fsck{ repair = true }` promotes); `fsck{
collect_garbage = true }` deletes them. Until then they are in the store:
queries read every record of a type, dependencies included. Writes use
`{ w = "majority", j = true }` and reads `{ level = "majority" }` unless the
options say otherwise.

**Leases and fencing.** A store handle makes its writer document
(`writer:<token>`, `lease_ttl` seconds, renewed past half of it) at its
first write, and before every save unit checks that the document is still
there and that no unexpired fsck lease is held: a save waits up to
`fsck_wait` seconds for a running fsck, then fails `unavailable`. In
transaction mode the check (and the renewal) is inside the save's
transaction, so an fsck taking over conflicts with it; degraded, it is read
again right before the root write. Every document carries the writer's
token (`_w`). A handle whose writer document fsck deleted (`force`, or a
collecting pass over an expired lease) fails every later write `conflict`:
open a new store. `rs:close()` deletes the document.

**Errors.** Failures come back as `nil, message, code, detail`, as in every
layer: `message` a string saying what was being done, `code` a string,
`detail` a table of the structured facts or nil
([`RecordFailureDetail`](#type-recordfailuredetail): the diff of a changed
schema, the sid a call ran into, the writer leases fsck found held, a
refused value; a driver failure's own detail, its `labels` and
`server_code`, with the store's facts added, so a transaction's retry still
sees `TransientTransactionError`). The codes: `invalid`, `conflict`, `duplicate`, `not_found`,
`unavailable`, `too_large`, `closed`, `clock_regression` (the records' own:
the clock went back further than the guard allows) and the document API's
([errors](errors.md)). Mistakes in the code raise: a malformed declaration,
an unknown option, an argument of the wrong type that no client value can
be (a `T` that is not a type, options that are not a table), a type the
store was not opened with. What a client can send (a sid, a content id, a
record, a filter, a time, an order, a page limit or cursor) is never raised about: it
is cast where the cast is exact or refused `invalid`, with nothing sent
([Taking client values](#taking-client-values)).]],
  sections = {
    {
      title = "Declaring record types",
      entries = {
        { fn = "define", module = "mongostore.records",
          params = { { "spec", "mongostore.RecordSpec", "the name, the fields, children, refs, dedup, indexes" } },
          returns = { { "T", "mongostore.RecordType", "the type, for `records.open` and every store call" } },
          raises = "a malformed declaration: an unknown key, a name that is not letters, digits, `_` and `-` "
            .. "starting with a letter (at most 100), a field or child name starting with `_` (or not a letter), "
            .. "a name declared twice, an unknown field type, a ref that is not a type, a ref in a child, an "
            .. "index naming an undeclared name",
          desc = [[
The content id of a record is the SHA-256 of a canonical encoding of its
type's name, its identity fields (names sorted, integers and floats kept
apart, a missing field as null), its children in order and the content ids
of the records its refs point to; fields declared `identity = false` are
left out. The dedup rule says what a second save of the same content id
does: `"content"` (the default) gives back the stored record's sid (its
metadata, the `identity = false` fields, stays as first stored); `"value"`
does the same when the metadata are equal too and fails `conflict` when they
differ; `"none"` stores a new record every time (the same table twice in one
graph is still one record).]],
          example = [[
local Author = records.define { name = "author", fields = { name = "string", born = "integer" } }
local Book = records.define {
  name = "book", dedup = "value",
  fields = { title = "string", year = "integer", note = { "string", identity = false } },
  children = { chapters = { fields = { title = "string", pages = "integer" } } },
  refs = { author = Author },
  indexes = { { "year" } },
}]] },
        { class = "mongostore.RecordSpec",
          desc = "What `records.define` takes; an unknown key raises.",
          fields = {
            { "name", "string", "the type's name, and its collection's after the prefix" },
            { "fields", "table<string, string|mongostore.RecordFieldSpec>?", "field name -> `\"string\"`, "
              .. "`\"integer\"`, `\"float\"`, `\"boolean\"` (each with `[]` for a list of it) or a declaration" },
            { "children", "table<string, mongostore.RecordChildSpec>?", "lists of sub-records embedded in the "
              .. "record's document, part of its content" },
            { "refs", "table<string, mongostore.RecordType|mongostore.RecordType[]>?", "records of other types "
              .. "(or this one), stored in their own collections and referred to by sid; `{ T }` for a list" },
            { "dedup", "string?", "`\"content\"`, `\"value\"` or `\"none\"`", default = "\"content\"" },
            { "indexes", "(string|{ [1]: string, [2]: integer })[][]?", "indexes of declared names, each a list "
              .. "of a name or `{ name, 1 | -1 }`; the sid is appended; named `by_<names>`" },
          } },
        { class = "mongostore.RecordFieldSpec",
          desc = "A field's declaration: `{ type, ... }`; an unknown key raises.",
          fields = {
            { "[1]", "string", "the type: `string`, `integer`, `float`, `boolean`, each with `[]` for a list" },
            { "identity", "boolean?", "false: metadata, left out of the content id", default = "true" },
            { "required", "boolean?", "a record without it (nil or `mongostore.null`) is refused `invalid`",
              default = "false" },
          } },
        { class = "mongostore.RecordChildSpec",
          desc = "An embedded child's declaration: `fields` and nested `children` (no refs); an unknown key raises.",
          fields = {
            { "fields", "table<string, string|mongostore.RecordFieldSpec>?", "as a type's" },
            { "children", "table<string, mongostore.RecordChildSpec>?", "children of the child" },
          } },
        { class = "mongostore.RecordType",
          desc = "A record type from `records.define`; `tostring` gives `record type <name>`.",
          fields = {
            { "name", "string", "the declared name" },
            { "dedup", "string", "the dedup rule" },
          } },
        { fn = "is_type", module = "mongostore.records",
          params = { { "x", "any", "any value" } },
          returns = { { "yes", "boolean", "whether `x` is a record type from `records.define`" } } },
        { fn = "content_id", module = "mongostore.records",
          params = { { "T", "mongostore.RecordType", "the record's type" },
                     { "record", "table", "the record, its refs as records (new tables, or fetched ones)" } },
          returns = { { "cid", "string", "the content id `rs:save` gives it (64 hex digits)" } },
          raises = "a `T` that is not a type, a ref given as a sid (its content is not at hand)",
          desc = RFAILS("`invalid`") .. ", when the record does not fit its type. No server is asked: a "
            .. "fetched record's ref uses its stored `_cid`.",
          example = [[
local cid = assert(records.content_id(Book, { title = "Emma", year = 1815, author = austen,
                                               chapters = { { title = "Chapter 1", pages = 12 } } }))
assert(rs:fetch_by_content_id(Book, cid)._sid == sid)]] },
        { class = "mongostore.Record",
          desc = [[
A stored record as a call gives it back: a table of its declared fields (a
field stored by nobody reads as nil, so an old record read with a type
upgraded by a new field has it nil), each child list (empty when it has
none), each ref as the referenced record (a list ref as a list; nested refs
loaded up to 50 levels, a sid beyond), and the store fields. Save it again,
or pass it as a ref: keys starting with `_` are not checked, and a ref with
a `_sid` is the stored record.]],
          fields = {
            { "_sid", "integer", "its sid" },
            { "_cid", "string", "its content id" },
            { "_ts", "integer?", "its store timestamp (store units), when the store keeps them" },
            { "_lin", "integer", "its lineage (the sid of the lineage's first record)" },
            { "_prev", "integer?", "its predecessor's sid" },
            { "_next", "integer?", "its successor's sid; nil on the latest" },
            { "_role", "string", "`\"main\"` or `\"dep\"`" },
          } },
        { field = "Q", module = "mongostore.records", type = "mongostore.QueryFields",
          desc = "The query builder of the models ([`model.Q`](models.md#model-q)), for `rq:where`." },
        { class = "mongostore.RecordFailureDetail",
          desc = "The `detail` of a failed records call (the fourth value): the facts the message tells, for "
            .. "code to read. Which fields it has depends on the failure; a failure with no facts has no detail.",
          fields = {
            { "labels", "string[]?", "a driver or server failure: the server's error labels (the document API's)" },
            { "server_code", "integer?", "a driver or server failure, a write error: the server's error code" },
            { "key", "table?", "`duplicate`: the key value the server reported" },
            { "diff", "{ schema: table<string, { expected: string, actual: string, changes: string[], "
              .. "additive: boolean }> }?", "`records.open` `invalid`: the collections whose schema changed" },
            { "sid", "integer?", "`conflict`: the stored record the call ran into" },
            { "next", "integer?", "`replace` `conflict`: the successor the record has already" },
            { "reason", "string?", "`records.open` `unavailable`: why the server has no transactions" },
            { "size", "integer?", "`too_large`: the encoded size of the record" },
            { "limit", "integer?", "`too_large`: the server's limit" },
            { "behind_ns", "integer?", "`clock_regression`: how far the clock went back" },
            { "token", "string?", "`conflict` of a lease taken over: the lost writer token" },
            { "writers", "table[]?", "`rs:fsck` `unavailable`: the writer leases that are held" },
            { "value", "string?", "`invalid` time of `rq:as_of`: the text refused" },
          } },
      },
    },
    {
      title = "Opening a store",
      entries = {
        { fn = "open", module = "mongostore.records",
          params = { { "db", "mongostore.Database", "the database of the store's collections" },
                     { "opts", "mongostore.RecordsOpenOptions", "the types, and how to store them" } },
          returns = { { "rs", "mongostore.RecordStore", "the store, its indexes created and its fingerprints "
            .. "checked" } },
          raises = "a `db` or `opts` of the wrong type, an unknown option or one of the wrong type, an empty "
            .. "`types`, a value that is not a type, two types of one name, a `transactions` or "
            .. "`timestamp_resolution` out of range",
          desc = RFAILS("`unavailable` (`transactions = \"require\"` on a server without transactions; "
            .. "`detail.reason`), `invalid` (a type's shape differs from the one stamped at the first open: "
            .. "`detail.diff.schema` names the collections and their changes), `conflict` (a concurrent open "
            .. "stamped another shape), or " .. DRIVER) .. [[.

The types their refs reach are opened too. It reads the server's
description (transactions, the BSON size limit), creates the indexes, makes
the page key, checks or stamps each type's fingerprint (its fields with their
types and flags, children, refs, dedup) and, with timestamps, reads the
highest stored `_ts` to seed the clock guard. `upgrade = true` applies a
change that is purely additive (new fields with `identity = false` that are
not required: old records keep their content ids and read back with them
nil) and re-stamps; any other change fails.]],
          example = [[
local rs = assert(records.open(db, {
  types = { Author, Book }, transactions = "auto",
  store_timestamps = true, timestamp_resolution = 1000,
  log = function(level, msg) print(level, msg) end,
}))
print(rs:info().mode)   -- "transactions" on a replica set, "degraded" on a standalone]] },
        { class = "mongostore.RecordsOpenOptions",
          desc = "What `records.open` takes; an unknown key or a value of the wrong Lua type raises.",
          fields = {
            { "types", "mongostore.RecordType[]", "the types (and, through their refs, every type they reach)" },
            { "prefix", "string?", "the collections' names start with it", default = "\"records.\"" },
            { "transactions", "string?", "`\"auto\"`, `\"require\"` or `\"never\"`", default = "\"auto\"" },
            { "store_timestamps", "boolean?", "stamp every save unit (`_ts`), for `as_of`", default = "true" },
            { "timestamp_resolution", "integer?", "nanoseconds per stored unit, 1 to 1e9 (1000: microseconds)",
              default = "1000" },
            { "upgrade", "boolean?", "apply a purely additive schema change", default = "false" },
            { "clock_regression_grace", "boolean?", "a clock under 1 ms behind the highest timestamp seen waits "
              .. "it out (false: fails at once)", default = "true" },
            { "allow_clock_regression", "boolean?", "turn the clock guard off: a timestamp may go back",
              default = "false" },
            { "lease_ttl", "number?", "seconds the writer lease lasts unless renewed (finite, > 0; else it raises)",
              default = "30" },
            { "fsck_wait", "number?", "seconds a save waits for a running fsck before `unavailable` (>= 0; "
              .. "NaN or below raises)", default = "10" },
            { "log", "fun(level: string, msg: string)?", "where the degraded-mode warning goes",
              default = "a line on stderr" },
            { "write_concern", "table?", "the write concern of every write",
              default = "{ w = \"majority\", j = true }" },
            { "read_concern", "table?", "the read concern of every read", default = "{ level = \"majority\" }" },
            { "test_hooks", "table?", "internal, for the specs (`after_write`: fail a save after a write); not "
              .. "part of the API" },
            { "clock", "fun(): integer?", "internal, for the specs: nanoseconds now; not part of the API" },
          } },
        { class = "mongostore.RecordStore",
          desc = "A store from `records.open`; `tostring` gives `records store <prefix> (<mode>)`." },
        { method = "info", of = "mongostore.RecordStore", params = {},
          returns = { { "info", "mongostore.RecordStoreInfo", "the store's mode and settings" } } },
        { class = "mongostore.RecordStoreInfo",
          desc = "What `rs:info()` returns.",
          fields = {
            { "mode", "string", "`\"transactions\"` or `\"degraded\"`" },
            { "reason", "string?", "degraded: why" },
            { "prefix", "string", "the collections' prefix" },
            { "types", "string[]", "the types' names: each declared type, then (depth first) the ones its refs reach" },
            { "store_timestamps", "boolean", "whether saves are stamped" },
            { "timestamp_resolution", "integer", "nanoseconds per stored unit" },
            { "writer", "string", "the token of this handle's writer lease" },
            { "commands", "integer", "commands the store has sent (round trips, for benchmarks)" },
            { "max_bson_size", "integer", "the server's document size limit" },
            { "write_concern", "table", "the write concern in use" },
            { "read_concern", "table", "the read concern in use" },
          } },
        { method = "close", of = "mongostore.RecordStore", params = {},
          returns = { { "ok", "true", "closed: the writer lease deleted; every later call fails `closed`" } },
          desc = "Idempotent. " .. RFAILS(DRIVER) .. " (the lease was not deleted; it expires after "
            .. "`lease_ttl`)." },
      },
    },
    {
      title = "Saving and reading",
      entries = {
        { method = "save", of = "mongostore.RecordStore",
          params = { { "T", "mongostore.RecordType", "the record's type" },
                     { "record", "table", "the record: its fields, children, and refs as new records (tables), "
                       .. "fetched ones, or sids" } },
          returns = { { "sid", "integer", "the root's sid (a stored one when dedup found it)" } },
          raises = "a `T` that is not one of the store's types",
          desc = RFAILS("`invalid` (a `record` that is not a table, a value that does not fit its type, an "
            .. "undeclared key, a ref that is neither a record nor a sid (or its decimal text), refs deeper than 50, "
            .. "a root given as a sid), `not_found` (a ref's sid is not stored), `too_large` (a record of "
            .. "the graph is over the server's limit: nothing was sent), `conflict` (`dedup = \"value\"` "
            .. "with other metadata; the writer lease was taken over), `unavailable` (fsck is running), "
            .. "`clock_regression`, `duplicate` (transaction mode, after 5 attempts), `closed`, or " .. DRIVER)
            .. [[.

The whole graph is checked and every content id computed before anything is
sent; then the sids of its new records are reserved in one `$inc`. A record
whose content id is stored already (dedup) is the stored one: its sid, its
timestamp (first stored wins); a dependency saved as a root becomes main.
Every record the save writes gets the same store timestamp. The root is
main, the records its refs reach are dependencies.]],
          example = [[
local austen = { name = "Jane Austen", born = 1775 }
local sid = assert(rs:save(Book, { title = "Emma", year = 1815, author = austen,
                                   chapters = { { title = "Chapter 1", pages = 12 } } }))]] },
        { method = "fetch", of = "mongostore.RecordStore",
          params = { { "T", "mongostore.RecordType", "the type" },
                     { "sid", "integer|string", "the record's sid, or its exact decimal text (`\"12\"`)" } },
          returns = { { "record", "mongostore.Record", "the record, its refs loaded" } },
          raises = "a `T` that is not one of the store's types",
          desc = RFAILS("`invalid` (a `sid` that is not an integer or its decimal text: a table such as "
            .. "`{ [\"$gt\"] = 0 }`, a number with a fraction, `\"12abc\"`; the message names its type, not "
            .. "its content, and nothing is sent), `not_found`, `closed`, or " .. DRIVER) .. ".",
          example = [[
local emma = assert(rs:fetch(Book, sid))
print(emma.title, emma.author.name, emma._sid, emma._ts)]] },
        { method = "fetch_by_content_id", of = "mongostore.RecordStore",
          params = { { "T", "mongostore.RecordType", "the type" },
                     { "cid", "string", "a content id: 64 hex digits (either case)" } },
          returns = { { "record", "mongostore.Record", "the record with that content id (of several, with "
            .. "`dedup = \"none\"`, the lowest sid)" } },
          raises = "a `T` that is not one of the store's types",
          desc = RFAILS("`invalid` (a `cid` that is not 64 hex digits, or not a string: nothing is sent), "
            .. "`not_found`, `closed`, or " .. DRIVER) .. "." },
        { method = "replace", of = "mongostore.RecordStore",
          params = { { "T", "mongostore.RecordType", "the type" },
                     { "sid", "integer|string", "the record to replace: the latest of its lineage (or its "
                       .. "sid's decimal text)" },
                     { "record", "table", "the successor, as for `save`" } },
          returns = { { "sid", "integer", "the successor's sid" } },
          raises = "as `save`",
          desc = RFAILS("`invalid` (a `sid` as `fetch` refuses it, a `record` that is not a table: nothing is "
            .. "sent), `not_found` (no record `sid`), `conflict` (it has a successor already, or gets one "
            .. "meanwhile: `detail.next`; the new content is stored already in another lineage or as an earlier "
            .. "revision: `detail.sid`), and the codes of `save`") .. [[.

The successor keeps the lineage (`_lin`), names its predecessor (`_prev`)
and is linked from it (`_next`, `_nts`). Idempotent: replacing with the same
successor's content again gives its sid (and finishes a link a crash left
undone); replacing with the record's own content gives `sid` back.]],
          example = [[
local sid2 = assert(rs:replace(Book, sid, { title = "Emma", year = 1816, author = austen,
                                            chapters = { { title = "Chapter 1", pages = 12 } } }))]] },
        { method = "history", of = "mongostore.RecordStore",
          params = { { "T", "mongostore.RecordType", "the type" },
                     { "sid", "integer|string", "any record of the lineage (or its sid's decimal text)" } },
          returns = { { "records", "mongostore.Record[]", "the lineage, oldest first, along the `_next` links "
            .. "(a successor a crash left unlinked is not part of it)" } },
          raises = "a `T` that is not one of the store's types",
          desc = RFAILS("`invalid` (a `sid` as `fetch` refuses it), `not_found`, `closed`, or " .. DRIVER) .. ".",
          example = [[
for _, b in ipairs(assert(rs:history(Book, sid2))) do print(b._sid, b.year) end]] },
        { method = "transaction", of = "mongostore.RecordStore",
          params = { { "fn", "fun(tx: mongostore.RecordStore): any", "the work: every save, replace and read "
            .. "through `tx`" } },
          returns = { { "ok", "true", "committed" }, { "values", "any", "then what `fn` returned" } },
          raises = "an `fn` that is not a function",
          desc = RFAILS("`unavailable` (degraded mode), `invalid` (called on a `tx` handle: transactions do "
            .. "not nest; or `fn` raised, the message in `err`), what `fn` returned as `nil, err, code`, "
            .. "`conflict` (the writer lease), `clock_regression`, `closed`, or `db:transaction`'s codes") .. [[.

Transaction mode only: `tx` is a handle on the same store whose calls run in
one transaction of the store's concerns, with one lease check and one store
timestamp for all of them; it commits when `fn` returns, aborts when it
returns `nil, err, code` or raises, and (as `db:transaction`) runs `fn` again
on a transient error, so `fn` must be safe to run twice. The sids an aborted
transaction reserved are not reused.]],
          example = [[
local ok, a, b = rs:transaction(function(tx)
  local x = assert(tx:save(Book, { title = "Persuasion", year = 1817, author = austen }))
  local y = assert(tx:save(Book, { title = "Northanger Abbey", year = 1817, author = austen }))
  return x, y
end)]] },
      },
    },
    {
      title = "Queries and pages",
      entries = {
        { method = "query", of = "mongostore.RecordStore",
          params = { { "T", "mongostore.RecordType", "the type" } },
          returns = { { "rq", "mongostore.RecordQuery", "every record of the type (dependencies too); nothing "
            .. "is sent until `all`, `count` or `page`" } },
          raises = "a `T` that is not one of the store's types",
          example = [[
local Q = records.Q
local q = rs:query(Book):where(Q.year:gte(1813)):only_latest():as_of("2026-01-01T00:00:00Z")
local books = assert(q:all())]] },
        { class = "mongostore.RecordQuery",
          desc = "A query over one type. Each builder returns a new query and leaves its receiver as it was. "
            .. "A builder given a value it must refuse (a client's filter, time or order) keeps the refusal: "
            .. "`all`, `count` and `page` return it as `nil, err, \"invalid\"` and send nothing." },
        { method = "where", of = "mongostore.RecordQuery",
          params = { { "cond", "mongostore.Cond|table", "a `Q` condition, a plain table of `field = value` "
            .. "(data: values cast to the fields' types, operators refused), or a `records.trusted` filter; "
            .. "`sid` is the sid" } },
          returns = { { "rq", "mongostore.RecordQuery", "with the condition added (conditions add up)" } },
          desc = [[
A plain table is a client's values, compared as data: a key starting with
`$` (a top-level `$or`, `$where`, `$expr`) or a value holding one (`{
secret = { ["$ne"] = null } }`) is refused, naming the field and pointing at
`Q` or `records.trusted`; each value is cast to its field's declared type
where the cast is exact (decimal text to an integer field or a sid, decimal
text to a float field, `"true"`/`"false"` to a boolean one; a list field
takes one element or a list of them) and refused otherwise; a name must be
a declared field, a child's path (`chapters.title`), a ref or a store field
(`sid`, `_ts`, `_lin`, ...), any other is refused. The values inside `Q`
conditions are cast the same way. Operators come from `Q` or a table marked
with `records.trusted`, sent as written. `$where`, `$function` and
`$accumulator` are refused anywhere, a trusted filter and `$expr` included.
A refusal is returned by the call that runs the query: `nil, err,
"invalid"`, nothing sent ([Taking client values](#taking-client-values)).]] },
        { method = "only_latest", of = "mongostore.RecordQuery", params = {},
          returns = { { "rq", "mongostore.RecordQuery", "only records without a successor (with `as_of`: "
            .. "without one stored by then)" } } },
        { method = "as_of", of = "mongostore.RecordQuery",
          params = { { "t", "integer|string", "nanoseconds since the epoch, or ISO-8601 text with its zone "
            .. "(up to 9 fractional digits)" } },
          returns = { { "rq", "mongostore.RecordQuery", "only records stored at or before `t` (a record "
            .. "without a timestamp never)" } },
          raises = "a store opened with `store_timestamps = false`",
          desc = [[
Nanoseconds may come as decimal text too. Text must carry its zone, `Z` or
an offset (`+01:00`, `-0500`): a date alone (`"2026-01-01"`) or a time
without a zone (`"2026-01-01T00:00:00"`) names no instant and is refused,
never read as UTC. A refused time (such text, a number with a fraction, a
value of another type) is kept in the query: `all`, `count` and `page`
return `nil, message, "invalid", detail`, `detail.value` the text.]] },
        { method = "order_by", of = "mongostore.RecordQuery",
          params = { { "keys", "{ [1]: string, [2]: integer }[]", "`{ { field, 1 | -1 }, ... }`: declared "
            .. "scalar fields, or `\"_ts\"`" } },
          returns = { { "rq", "mongostore.RecordQuery", "in that order, the sid breaking ties (ascending)" } },
          raises = "a `keys` or a key that is not a table",
          desc = "Missing and null values sort first ascending and last descending, as MongoDB sorts them. "
            .. "Without `order_by` the order is by sid. A client may choose the order: a direction of `\"1\"` "
            .. "or `\"-1\"` is taken, and a name that is not a scalar field (a list, a child, a ref, an "
            .. "undeclared name) or a direction that is not 1 or -1 is kept as a refusal, returned as `invalid` "
            .. "by the call that runs the query." },
        { method = "all", of = "mongostore.RecordQuery", params = {},
          returns = { { "records", "mongostore.Record[]", "every match, in order, refs loaded" } },
          desc = RFAILS("`invalid` (what a builder refused: nothing is sent), `closed`, or " .. DRIVER) .. "." },
        { method = "count", of = "mongostore.RecordQuery", params = {},
          returns = { { "n", "integer", "how many records match" } },
          desc = RFAILS("`invalid` (what a builder refused: nothing is sent), `closed`, or " .. DRIVER) .. "." },
        { method = "page", of = "mongostore.RecordQuery",
          params = { { "opts", "mongostore.RecordPageOptions", "the page's limit, and the cursor it starts at" } },
          returns = { { "page", "mongostore.RecordPage", "the records after the cursor, and the next cursor" } },
          raises = "an `opts` that is not a table, an unknown key, a `limit` that is not a number or text, a "
            .. "`cursor` that is not a string",
          desc = RFAILS("`invalid` (what a builder refused; a `limit` that is not an integer from 1 to 10000 or "
            .. "its decimal text; a cursor that is not this query's: malformed, too long, edited or forged (its "
            .. "HMAC does not match), or from another query, type, order or store: nothing is sent), `closed`, or "
            .. DRIVER) .. [[.

Keyset pages: the cursor carries the last record's order keys and sid,
signed with the store's page key and bound to the query (its type, filter,
order and store), and the next page asks for the records after them (an
`$or` of one branch per key, nulls matched explicitly, the sid last), so a
page costs the same at any position. While nothing changes the pages cover
every match exactly once, in `all`'s order. The cursor is the one format
of every listing (`c3.` then the position and its MAC, base64url), the
executions listing's too.]],
          example = [[
local cursor
repeat
  local page = assert(rs:query(Book):only_latest():order_by { { "year", -1 } }:page { limit = 100, cursor = cursor })
  for _, b in ipairs(page.items) do print(b.year, b.title) end
  cursor = page.next_cursor
until not cursor]] },
        { class = "mongostore.RecordPageOptions",
          desc = "What `rq:page` takes, the page shape of every listing; an unknown key raises.",
          fields = {
            { "limit", "integer|string?", "at most this many records, 1 to 10000 (decimal text is taken); "
              .. "default 100" },
            { "cursor", "string?", "the `next_cursor` of the page before (nil: the first page)" },
          } },
        { class = "mongostore.RecordPage",
          desc = "What `rq:page` returns.",
          fields = {
            { "items", "mongostore.Record[]", "at most `limit` records" },
            { "next_cursor", "string?", "the cursor of the next page (opaque); nil after the last" },
          } },
      },
    },
    {
      title = "Searching",
      intro = [[
`rs:searcher(opts)` builds a search the way a query language would: bind a
root variable over a record type, add conditions on its fields, on fields
reached through refs (any depth), on child sets and list refs (`any`, `all`,
`none`), on lists (`has`, `has_all`, `has_any`, `has_only`, `length`), join
them with `s.all_of`, `s.any_of`, `s.none_of`, declare outputs, sort, and
read a result set (`results`), a count or keyset pages.

```lua
local s = rs:searcher { only_latest = true }
local b = s:variable(Book)
s:add(b.year:ge(1990))
s:add(b.author.name:eq("Ann"))
s:add(b.chapters:any(function(c) return c.pages:gt(10) end))
s:add(b.tags:has_only { "sf", "classic" })
s:output(b, "book"); s:output(b.title, "title"); s:output(b.author.name, "author")
s:sort(b.year, -1)
for _, row in ipairs(assert(s:results())) do print(row.book._sid, row.title, row.author) end
```

What each construct is sent as (both bundled servers, mongo-java-server
and SecantusDB, run every one of them):

- **Fields** of the root variable (and the store fields `_sid`, `_cid`,
  `_ts`, `_lin`) are conditions of the one `find` on the type's collection:
  `$eq`, `$ne`, `$lt`, `$lte`, `$gt`, `$gte`, `$in`, `$nin`; `prefix`,
  `suffix` and `contains` an anchored `$regex` of the text with every
  character but letters and digits escaped (matched as itself); `is_known`
  `$ne: null`, `is_unknown` `null` (missing or null). A field compared with
  another scalar field of the same variable (`b.pages:gt(b.min_pages)`) is
  an `$expr` (not inside a child set's element).
- **A ref path** (`b.author.name:eq("Ann")`, `b.author.country.code`, a list
  ref `b.editors.name`) is a semi-join: one `find` on the referenced type's
  collection for the sids that meet the condition (projected to `_id`),
  then `{ author = { $in = sids } }` in the referring filter (`$nin` for
  `none`; `all` finds the sids that fail the condition, `$nin`). One find
  per ref condition per call (served by the referenced type's indexes where
  it declares them), never a find per row; the referring find's `$in` is
  served by an index on the ref where the type declares one
  (`indexes = { { "author" } }`). `$lookup` (which both servers run) is
  not used: it joins once per referring document, where the semi-join reads
  the referenced side once and keeps the search a plain `find` that counts,
  sorts and pages as `rq` does. A search whose ref condition matches very
  many records sends their sids: narrow the referenced side. Referenced records are not
  restricted by `only_latest` or `as_of` (a ref names one record).
- **A child set** (embedded list): `any` is `$elemMatch` of the inner
  condition, `none` `$nor` of it, `all` `$nor` of an `$elemMatch` of the
  condition's negation. Paths inside are relative to the element.
- **Lists**: `has` is `$eq` (an element equal), `has_any` `$in`, `has_all`
  `$all`, `has_only` "a list with no element outside the set" (`$nor` of an
  `$elemMatch` `$nin`; an empty list has only those, a missing one not);
  `length():eq(n)` `$size`, the others whether element `n - 1` exists (on
  list fields, child sets and list refs).
- **Outputs** are read from the loaded records: `store:load`'s batched
  finds of referenced records (one `$in` find per referenced type).
- `only_latest` and `as_of` restrict the root variable as `rq:only_latest`
  and `rq:as_of` do; `count` counts every match (offset and limit aside).

Values are data: each is cast to its field's declared type (decimal text to
an integer field) or refused; a table (`{ ["$gt"] = 0 }`) or a JSON null is
refused, never sent as an operator; text for `prefix`, `suffix` and
`contains` is matched as itself. A refused value, limit, offset, sort or time is kept and returned
by `results`, `count` or `page` as `nil, message, "invalid"` with nothing
sent; a wrong Lua type, an unknown option or an unknown field raises.
A second root variable that nothing joins (a cartesian product) is refused
as `invalid`: reach other records through ref paths.]],
      entries = {
        { method = "searcher", of = "mongostore.RecordStore",
          params = { { "opts", "mongostore.SearcherOptions?", "`only_latest`, `as_of`" } },
          returns = { { "s", "mongostore.Searcher", "an empty search; nothing is sent until `results`, `count` "
            .. "or `page`" } },
          raises = "an `opts` that is not a table, an unknown option, an `only_latest` that is not a boolean, "
            .. "`as_of` on a store opened with `store_timestamps = false`" },
        { class = "mongostore.SearcherOptions",
          desc = "What `rs:searcher` takes; an unknown key raises.",
          fields = {
            { "only_latest", "boolean?", "root records without a successor (with `as_of`: none stored by then)" },
            { "as_of", "integer|string?", "root records stored at or before this time (as `rq:as_of` takes it; "
              .. "a bad time is `invalid` from the call that runs the search)" },
          } },
        { class = "mongostore.Searcher",
          desc = "A search under construction: its builders change it and return it." },
        { method = "variable", of = "mongostore.Searcher",
          params = { { "T", "mongostore.RecordType", "one of the store's types" } },
          returns = { { "v", "mongostore.SearchPath", "a root variable: index it by field name for paths" } },
          raises = "a `T` that is not a record type of the store" },
        { method = "add", of = "mongostore.Searcher",
          params = { { "cond", "mongostore.SearchCondition", "a condition on the root variable" } },
          returns = { { "s", "mongostore.Searcher", "the searcher (conditions add up)" } },
          raises = "a `cond` that is not a condition" },
        { method = "output", of = "mongostore.Searcher",
          params = { { "x", "mongostore.SearchPath", "a variable (its record) or a path (its value; through a "
              .. "list ref the list of values)" },
            { "name", "string", "the row's field that holds it" } },
          returns = { { "s", "mongostore.Searcher", "the searcher" } },
          raises = "an `x` that is not a path, a `name` not a non-empty string or given twice",
          desc = "Without outputs a row holds the root record under its type's name (`row.book`)." },
        { method = "sort", of = "mongostore.Searcher",
          params = { { "path", "mongostore.SearchPath", "a scalar field of the root variable (or `_ts`, `_sid`)" },
            { "dir", "integer|string?", "1 (default) or -1, also as text" } },
          returns = { { "s", "mongostore.Searcher", "the searcher; sorts add up, the sid breaks ties" } },
          raises = "a `path` that is not a path",
          desc = "A path through a ref or into a list, or another direction, is `invalid` from the call that "
            .. "runs the search. Nulls sort first ascending and last descending." },
        { method = "offset", of = "mongostore.Searcher",
          params = { { "n", "integer|string", "rows to skip (0 or more; decimal text is taken)" } },
          returns = { { "s", "mongostore.Searcher", "the searcher" } },
          raises = "an `n` that is neither a number nor text" },
        { method = "limit", of = "mongostore.Searcher",
          params = { { "n", "integer|string", "at most this many rows (1 or more; decimal text is taken)" } },
          returns = { { "s", "mongostore.Searcher", "the searcher" } },
          raises = "an `n` that is neither a number nor text" },
        { method = "results", of = "mongostore.Searcher", params = {},
          returns = { { "rows", "mongostore.SearchResults", "the rows, in order" } },
          desc = RFAILS("`invalid` (a refused value, limit, offset, sort or time; disconnected variables: "
            .. "nothing is sent), `closed`, or " .. DRIVER) .. "." },
        { method = "count", of = "mongostore.Searcher", params = {},
          returns = { { "n", "integer", "how many root records match (offset and limit aside)" } },
          desc = RFAILS("`invalid`, `closed`, or " .. DRIVER) .. "." },
        { method = "page", of = "mongostore.Searcher",
          params = { { "opts", "mongostore.RecordPageOptions", "the page's limit, and the cursor it starts at" } },
          returns = { { "page", "mongostore.SearchPage", "the rows after the cursor, and the next cursor" } },
          raises = "an `opts` that is not a table, an unknown key, a `limit` that is not a number or text, a "
            .. "`cursor` that is not a string",
          desc = RFAILS("`invalid` (as `results`; a search with `offset` or `limit`; a `limit` that is not an "
            .. "integer from 1 to 10000; a cursor this search did not give), `closed`, or " .. DRIVER) .. [[.

Keyset pages as `rq:page` makes them: one root variable, its scalar sort
keys the order, the sid the tie-breaker, nulls matched explicitly. The
cursor (`mongostore.cursor`, HMAC-signed) is bound to the store, the type,
the conditions as declared, `only_latest`, `as_of` and the sorts.]] },
        { class = "mongostore.SearchPage",
          desc = "What `s:page` returns.",
          fields = {
            { "items", "table[]", "at most `limit` rows, as `results` makes them" },
            { "next_cursor", "string?", "the cursor of the next page (opaque); nil after the last" },
          } },
        { class = "mongostore.SearchPath",
          desc = "A variable, or a field, child set or ref under one: `b.title`, `b.author.name`. Index it by "
            .. "name to go on (through refs); a field's name that is one of the methods below is not reachable "
            .. "as a path. A name the type does not have raises." },
        { method = "eq", of = "mongostore.SearchPath",
          params = { { "v", "any", "a value of the field's type (or another scalar field of the same variable)" } },
          returns = { { "cond", "mongostore.SearchCondition", "equal" } } },
        { method = "ne", of = "mongostore.SearchPath", params = { { "v", "any", "as `eq`" } },
          returns = { { "cond", "mongostore.SearchCondition", "not equal (a missing value too)" } } },
        { method = "lt", of = "mongostore.SearchPath", params = { { "v", "any", "as `eq`" } },
          returns = { { "cond", "mongostore.SearchCondition", "less than" } } },
        { method = "le", of = "mongostore.SearchPath", params = { { "v", "any", "as `eq`" } },
          returns = { { "cond", "mongostore.SearchCondition", "at most" } } },
        { method = "gt", of = "mongostore.SearchPath", params = { { "v", "any", "as `eq`" } },
          returns = { { "cond", "mongostore.SearchCondition", "greater than" } } },
        { method = "ge", of = "mongostore.SearchPath", params = { { "v", "any", "as `eq`" } },
          returns = { { "cond", "mongostore.SearchCondition", "at least" } } },
        { method = "in_list", of = "mongostore.SearchPath", params = { { "list", "any[]", "values" } },
          returns = { { "cond", "mongostore.SearchCondition", "equal to one of them" } } },
        { method = "nin_list", of = "mongostore.SearchPath", params = { { "list", "any[]", "values" } },
          returns = { { "cond", "mongostore.SearchCondition", "equal to none of them" } } },
        { method = "prefix", of = "mongostore.SearchPath", params = { { "text", "string", "the start" } },
          returns = { { "cond", "mongostore.SearchCondition", "a string field starting with `text`" } },
          raises = "a field that is not a string field" },
        { method = "suffix", of = "mongostore.SearchPath", params = { { "text", "string", "the end" } },
          returns = { { "cond", "mongostore.SearchCondition", "a string field ending with `text`" } },
          raises = "a field that is not a string field" },
        { method = "contains", of = "mongostore.SearchPath", params = { { "text", "string", "a part" } },
          returns = { { "cond", "mongostore.SearchCondition", "a string field holding `text`" } },
          raises = "a field that is not a string field" },
        { method = "is_known", of = "mongostore.SearchPath", params = {},
          returns = { { "cond", "mongostore.SearchCondition", "a value there (not missing, not null)" } } },
        { method = "is_unknown", of = "mongostore.SearchPath", params = {},
          returns = { { "cond", "mongostore.SearchCondition", "no value there" } } },
        { method = "has", of = "mongostore.SearchPath", params = { { "v", "any", "a value" } },
          returns = { { "cond", "mongostore.SearchCondition", "a list field with an element equal to `v`" } },
          raises = "a path that is not a list field" },
        { method = "has_all", of = "mongostore.SearchPath", params = { { "list", "any[]", "values" } },
          returns = { { "cond", "mongostore.SearchCondition", "a list holding every one of them" } } },
        { method = "has_any", of = "mongostore.SearchPath", params = { { "list", "any[]", "values" } },
          returns = { { "cond", "mongostore.SearchCondition", "a list holding one of them at least" } } },
        { method = "has_only", of = "mongostore.SearchPath", params = { { "list", "any[]", "values" } },
          returns = { { "cond", "mongostore.SearchCondition", "a list with no element outside them" } } },
        { method = "length", of = "mongostore.SearchPath", params = {},
          returns = { { "len", "mongostore.SearchLength", "the length of a list field, child set or list ref, "
            .. "compared with `eq`, `ne`, `lt`, `le`, `gt`, `ge` and an integer" } } },
        { method = "any", of = "mongostore.SearchPath",
          params = { { "fn", "fun(e: mongostore.SearchPath): mongostore.SearchCondition", "the condition on an "
            .. "element (a child or a referenced record)" } },
          returns = { { "cond", "mongostore.SearchCondition", "an element meets it" } },
          raises = "a path that is not a child set or a ref, an `fn` that does not return a condition" },
        { method = "all", of = "mongostore.SearchPath",
          params = { { "fn", "fun(e: mongostore.SearchPath): mongostore.SearchCondition", "as `any`" } },
          returns = { { "cond", "mongostore.SearchCondition", "every element meets it (none: true)" } } },
        { method = "none", of = "mongostore.SearchPath",
          params = { { "fn", "fun(e: mongostore.SearchPath): mongostore.SearchCondition", "as `any`" } },
          returns = { { "cond", "mongostore.SearchCondition", "no element meets it" } } },
        { class = "mongostore.SearchLength", desc = "`path:length()`, compared with an integer of at least 0." },
        { method = "eq", of = "mongostore.SearchLength", params = { { "n", "integer", "a length" } },
          returns = { { "cond", "mongostore.SearchCondition", "exactly `n` elements" } } },
        { method = "ne", of = "mongostore.SearchLength", params = { { "n", "integer", "a length" } },
          returns = { { "cond", "mongostore.SearchCondition", "not `n` elements" } } },
        { method = "lt", of = "mongostore.SearchLength", params = { { "n", "integer", "a length" } },
          returns = { { "cond", "mongostore.SearchCondition", "fewer than `n`" } } },
        { method = "le", of = "mongostore.SearchLength", params = { { "n", "integer", "a length" } },
          returns = { { "cond", "mongostore.SearchCondition", "at most `n`" } } },
        { method = "gt", of = "mongostore.SearchLength", params = { { "n", "integer", "a length" } },
          returns = { { "cond", "mongostore.SearchCondition", "more than `n`" } } },
        { method = "ge", of = "mongostore.SearchLength", params = { { "n", "integer", "a length" } },
          returns = { { "cond", "mongostore.SearchCondition", "at least `n`" } } },
        { class = "mongostore.SearchCondition",
          desc = "A condition: from a path's methods, or `s.all_of(...)` (every one), `s.any_of(...)` (one at "
            .. "least), `s.none_of(...)` (none), called with a dot, each taking one or more conditions." },
        { method = "all_of", of = "mongostore.Searcher",
          params = { { "...", "mongostore.SearchCondition", "one or more conditions" } },
          returns = { { "cond", "mongostore.SearchCondition", "every one of them holds" } },
          raises = "no condition, or an argument that is not one",
          desc = "Called with a dot, not a colon: `s.all_of(a, b)` (also `mongostore.records.search.all_of`)." },
        { method = "any_of", of = "mongostore.Searcher",
          params = { { "...", "mongostore.SearchCondition", "one or more conditions" } },
          returns = { { "cond", "mongostore.SearchCondition", "one of them holds at least" } },
          raises = "no condition, or an argument that is not one",
          desc = "Called with a dot, not a colon: `s.any_of(a, b)` (also `mongostore.records.search.any_of`)." },
        { method = "none_of", of = "mongostore.Searcher",
          params = { { "...", "mongostore.SearchCondition", "one or more conditions" } },
          returns = { { "cond", "mongostore.SearchCondition", "none of them holds" } },
          raises = "no condition, or an argument that is not one",
          desc = "Called with a dot, not a colon: `s.none_of(a, b)` (also `mongostore.records.search.none_of`)." },
        { class = "mongostore.SearchResults",
          desc = "The rows of `s:results()`: an array (`#rows`, `ipairs`), each row a table of the outputs by "
            .. "name." },
        { method = "first", of = "mongostore.SearchResults", params = {},
          returns = { { "row", "table?", "the first row; nil when there is none" } } },
        { method = "one", of = "mongostore.SearchResults", params = {},
          returns = { { "row", "table", "the only row" } },
          desc = "No row is `nil, message, \"not_found\", { count = 0 }`; several `nil, message, \"invalid\", "
            .. "{ count = n }`, the message naming the count." },
        { method = "scalars", of = "mongostore.SearchResults",
          params = { { "name", "string?", "an output (may be left out when there is one)" } },
          returns = { { "values", "table", "its value in each row, in order (`n` the row count)" } },
          raises = "no `name` with several outputs, a `name` that is not an output" },
        { method = "column", of = "mongostore.SearchResults",
          params = { { "name", "string", "an output" } },
          returns = { { "values", "table", "its value in each row, in order (`n` the row count)" } },
          raises = "a `name` that is not an output" },
      },
    },
    {
      title = "OPTIMADE filters",
      intro = [[
`records.optimade(rs, T, filter, opts)` takes a filter in the OPTIMADE v1.x
filter language, as a client sends it (`?filter=` of an OPTIMADE endpoint),
and runs it as a searcher over `T`: the result set, or with `opts.page` a
page in the page shape. The grammar is the project's own, written with LPeg:

- **Comparisons** `= != < <= > >=` of a property with a value, a value on
  either side (`1990 <= year` is `year >= 1990`), or of two single fields of
  the record itself (`pages > min_pages`). A comparison with an unknown
  (missing or null) value is false, `!=` included (`year != 1990` matches
  records whose year is known and not 1990; `NOT year = 1990` matches the
  unknown ones too).
- **Text**: `CONTAINS`, `STARTS [WITH]`, `ENDS [WITH]`, matched as
  itself (no pattern characters). Strings are in double quotes with `\"` and
  `\\` as the only escapes; numbers as the spec writes them (`1`, `-1.5`,
  `+2`, `1e3`, `.5`): text for a string field, a number for an integer or
  float field (an integer field takes a whole number only).
- **Lists**: `HAS v`, `HAS ALL v, ...`, `HAS ANY v, ...`, `HAS ONLY v, ...`
  on list fields; `LENGTH [op] n` on list fields, child sets and list refs.
- `IS KNOWN`, `IS UNKNOWN` on any property; `NOT` binds tighter than
  `AND`, `AND` than `OR`; parentheses.
- **Dotted paths**: a ref's fields (`author.name`, through list refs, any
  depth: a semi-join as in the searcher), a child set's (`chapters.pages > 10`:
  some chapter has more than 10 pages).
- `_httk_store_timestamp` is the store timestamp (ISO-8601 text with a zone,
  or integer nanoseconds): `_httk_store_timestamp <= "2026-01-01T00:00:00Z"`
  is `as_of` (records stored by then), `<`, `>`, `>=`, `=` and `!=` compare
  at the store's resolution.

Keywords are upper case and properties lower case (`[a-z_][a-z0-9_]*`, as
OPTIMADE has them). A filter is client input: it never raises. A property
the type lacks is `invalid` naming it, a syntax error `invalid` with where
it is (`optimade: line 1, column 12: unexpected "=="`), as are a value of the
wrong kind, a filter longer than 8192 bytes, parentheses nested deeper than
24, a NUL byte, text that is not UTF-8 and a filter that is not a string;
nothing is sent for a refused filter. Tuples (`HAS "a":"b"`), operators after
`HAS` and boolean literals are not part of the grammar; `NOT` is taken once
per phrase, as the specification's grammar has it (`NOT (NOT x)` for two).
A field named like a searcher method (`length`, `has`, `any`, `eq`, ...) is
not reachable through the searcher's paths and is refused `invalid`.

The specs check the corpus they share against the `optimade` Python
package's Lark grammar (1.5.0, pinned in `tools/requirements-test.txt`):
what one accepts the other parses, and every syntax error here is one there,
but for three listed differences: the package takes a backslash before any
character in a string (here only `\"` and `\\`), an empty filter (no
filter to it; `invalid` here), and refuses a fraction after `LENGTH` (here
parsed, then refused as a value).]],
      entries = {
        { fn = "optimade", module = "mongostore.records",
          params = { { "rs", "mongostore.RecordStore", "the store" },
                     { "T", "mongostore.RecordType", "one of the store's types: the filter's properties are its" },
                     { "filter", "string", "the OPTIMADE filter, as the client sent it" },
                     { "opts", "mongostore.OptimadeOptions?", "`page`, `only_latest`" } },
          returns = { { "rows", "mongostore.SearchResults|mongostore.SearchPage",
                        "the matching records (`row[T.name]`); with `opts.page` a page `{ items, next_cursor }`" } },
          raises = "an `rs` that is not a record store, a `T` that is not a record type (of the store), an "
            .. "`opts` that is not a table, an unknown option, a `page` that is not a table or holds an unknown "
            .. "key or a wrong Lua type",
          desc = RFAILS("`invalid` (a syntax error with its line and column, an unknown property, a value of the "
            .. "wrong kind, a filter too long or nested too deep, NUL bytes, invalid UTF-8, a bad page limit or "
            .. "cursor: nothing is sent), `closed`, or " .. DRIVER) .. ".",
          example = [[
-- GET /optimade/v1/structures?filter=...&page_limit=20&page_cursor=...
local page, err, code = records.optimade(rs, Structure, args.filter,
  { page = { limit = args.page_limit or 20, cursor = args.page_cursor } })
if not page then return code == "invalid" and 400 or 500, err end
for _, row in ipairs(page.items) do print(row.structure.formula) end]] },
        { class = "mongostore.OptimadeOptions",
          desc = "What `records.optimade` takes; an unknown key raises.",
          fields = {
            { "page", "mongostore.RecordPageOptions?", "`{ limit, cursor }`: a page of the matches (as `s:page`)" },
            { "only_latest", "boolean?", "records without a successor (as the searcher's)" },
          } },
      },
    },
    {
      title = "Taking client values",
      intro = [[
A web handler hands the store what a client sent: a sid from the path, a
filter from a JSON body, a time, an order and a page size from the query
string. Whatever decoded them (the core `json.decode`, `ejson.decode`,
lua-cjson, `ngx.req.get_uri_args`), the store takes them as values:

- **Sids and content ids** (`rs:fetch`, `rs:history`, `rs:replace`,
  `rs:fetch_by_content_id`, refs in `rs:save`): an integer or its exact
  decimal text (`"12"` is sid 12); anything else (`{ ["$gt"] = 0 }`, `1.5`,
  `"12abc"`, `nil`) is `nil, err, "invalid"`, the message naming the value's
  type and never its content, with nothing sent. A table can never reach
  the server as a sid.
- **Filters** (`rq:where`): a plain table is `field = value` data. An
  operator in it, at the top (`$or`, `$where`, `$expr`) or in a value
  (`{ ["$ne"] = null }`, `{ ["$regex"] = "." }`), is refused, naming the
  field and pointing at `Q` or `records.trusted`; a value is cast to its
  field's declared type where that is exact (decimal text to an integer
  field or a sid, `"true"` to a boolean field) and refused otherwise; an
  undeclared name is refused. A regex box from `ejson.decode` where a
  string belongs is refused too. A value that is nil is no condition (Lua
  drops the key): check that a handler's required values are there.
- **Operators** come from code: the `Q` builders (`Q.year:gte(body.since)`
  casts its value as well), or a table marked with `records.trusted`, which
  is sent as written. `$where`, `$function` and `$accumulator` are refused
  everywhere, in trusted filters, in `Q` conditions and inside `$expr`.
- **Times, orders, pages**: `rq:as_of` takes nanoseconds as text, or
  ISO-8601 with its zone (1677 to 2262, what int64 nanoseconds count);
  `rq:order_by` takes `"1"`/`"-1"`; `rq:page` takes `limit = "20"` and a
  client's `cursor` text. What cannot be taken (a limit out of 1..10000, a
  cursor this query did not give) is returned as `invalid` by the call that
  runs the query, not raised, so a handler answers 400, not 500.

Only mistakes no client value can cause raise: a `T` that is not one of
the store's types, an unknown option.]],
      entries = {
        { fn = "trusted", module = "mongostore.records",
          params = { { "filter", "table", "a filter written as code, operators and all" } },
          returns = { { "filter", "table", "the same table, marked as code (nothing is copied)" } },
          raises = "a `filter` that is not a table",
          desc = "Marks a filter as code for `rq:where`: its operators are sent as written (renaming `sid` to "
            .. "`_id`), only `$where`, `$function` and `$accumulator` refused. The mark is the one "
            .. "`mongostore.query.trusted` gives (and `model.trusted`), kept with the table. Never mark a "
            .. "table a client sent: mark the table your code builds around a client's values, and cast those "
            .. "yourself.",
          example = [[
-- GET /books/:sid and POST /books/search?cursor=...&limit=20 in an OpenResty handler:
-- sid and args come from the URI, body from ms.json.decode(ngx.req.get_body_data())
local function show(sid)
  local b, err, code = rs:fetch(Book, sid)           -- "12" is sid 12; {"$gt":0} is invalid
  if not b then return code == "invalid" and 400 or code == "not_found" and 404 or 500, err end
  return 200, { title = b.title, year = b.year }
end

local function search(args, body)
  local q = rs:query(Book):where { title = body.title }      -- data: {"$ne":null} is invalid
  if body.since then q = q:where(records.Q.year:gte(body.since)) end   -- "1813" is cast to 1813
  q = q:where(records.trusted { note = { ["$exists"] = false } })       -- code, not client data
  local page, err, code = q:order_by { { "year", args.dir or 1 } }:page { limit = args.limit or 20,
                                                                          cursor = args.cursor }
  if not page then return code == "invalid" and 400 or 500, err end
  return 200, page
end]] },
      },
    },
    {
      title = "Integrity: fsck",
      entries = {
        { method = "fsck", of = "mongostore.RecordStore",
          params = { { "opts", "mongostore.FsckOptions?", "what to repair and collect" } },
          returns = { { "summary", "mongostore.FsckSummary", "what it found and did, per collection" } },
          raises = "an unknown option, or one of the wrong type or negative",
          desc = RFAILS("`unavailable` (another fsck holds the lease; writer leases of other handles are "
            .. "held past `wait`: `detail.writers`), `conflict` (another fsck took its lease over), `closed`, or "
            .. DRIVER) .. [[.

Takes the exclusive fsck lease (`<prefix>_meta` `fsck`), so writers wait
while it runs; without `force` it waits up to `wait` seconds for the other
handles' writer leases to expire and refuses while they are held, with
`force` it deletes them (their holders then fail every write `conflict`),
and a pass that repairs or collects deletes the expired ones too. It reads
every collection of the prefix named like a type, walks from the main
records through `_refs` and the lineage links, and reports per collection.
It deletes only dependencies nothing reaches, and only in the store's own
collections (its types' and those stamped in `_meta`). It gives the lease
back and bumps `gen` when it is done.]],
          example = [[
local summary = assert(rs:fsck { repair = true, collect_garbage = true })
print(summary.clean, summary.totals.examined, summary.totals.deleted)]] },
        { class = "mongostore.FsckOptions",
          desc = "What `rs:fsck` takes; an unknown key or a value of the wrong type raises.",
          fields = {
            { "repair", "boolean?", "repair lineage links (promote an unpromoted successor, link a missing "
              .. "`_next`, drop a dangling one) and the sid counter", default = "false" },
            { "collect_garbage", "boolean?", "delete the unreachable dependencies", default = "false" },
            { "force", "boolean?", "take the fsck lease from its holder and delete live writer leases: only once "
              .. "their processes are known dead", default = "false" },
            { "clamp_future_timestamps", "boolean?", "with `repair`: set a timestamp in the future to now",
              default = "false" },
            { "wait", "number?", "seconds to wait for other writers' leases to expire (>= 0; NaN or below "
              .. "raises)", default = "0" },
            { "future_slack", "number?", "seconds a timestamp may run ahead of this clock before it is "
              .. "reported (>= 0; NaN or below raises)", default = "5" },
            { "verify_content", "boolean?", "read every reachable record of a declared type whole and compute "
              .. "its content id again: a document edited behind the store's back is a violation",
              default = "false" },
          } },
        { class = "mongostore.FsckSummary",
          desc = "What `rs:fsck` returns.",
          fields = {
            { "clean", "boolean", "no violation and no conflict" },
            { "collections", "table<string, mongostore.FsckCollection>", "by collection name" },
            { "totals", "{ examined: integer, repaired: integer, conflicts: integer, deleted: integer, "
              .. "unreachable: integer, violations: integer }", "the collections' sums (violations counted)" },
            { "violations", "mongostore.FsckViolation[]", "every violation, of every collection" },
            { "taken_over", "string[]", "the tokens of the live writer leases it deleted (`force`)" },
            { "stale_writers", "integer", "expired writer leases it deleted" },
            { "gen", "integer", "the fsck lease's `gen` after this pass" },
          } },
        { class = "mongostore.FsckCollection",
          desc = "One collection's part of an fsck summary.",
          fields = {
            { "examined", "integer", "documents read" },
            { "repaired", "integer", "documents changed by a repair" },
            { "conflicts", "integer", "lineage forks and mismatched links (never repaired)" },
            { "unreachable", "integer", "dependencies nothing reaches" },
            { "deleted", "integer", "of those, deleted (`collect_garbage`)" },
            { "violations", "mongostore.FsckViolation[]", "what is wrong in it" },
            { "owned", "boolean", "one of the store's own collections (the only ones it deletes in)" },
          } },
        { class = "mongostore.FsckViolation",
          desc = "One thing fsck found wrong.",
          fields = {
            { "collection", "string", "the collection" },
            { "sid", "any", "the record's `_id`" },
            { "kind", "string", "`bad_sid`, `bad_role`, `bad_refs`, `dangling_ref`, `dangling_lineage`, "
              .. "`lineage_fork`, `lineage_mismatch`, `unpromoted_successor`, `missing_next`, "
              .. "`future_timestamp`, `sid_beyond_counter`, `invalid_record`, `content_mismatch` (these two with "
              .. "`verify_content`)" },
            { "message", "string", "what, in words" },
          } },
      },
    },
  },
}

api.pages[#api.pages + 1] = {
  file = "values",
  title = "Values",
  module = "mongostore",
  summary = "What can be stored: documents, arrays, null, exact integers, every BSON type (the boxes); how "
    .. "documents remember their order and numeric types; the JSON and BSON codecs.",
  intro = [[
The value rules, the same for every write, the JSON codec and the BSON codec:

- A table with string keys becomes a document; a table whose keys are exactly
  `1..n`, or one marked with `mongostore.array(t)`, becomes an array, and
  arrays come back marked, so an empty array stays an array.
- `mongostore.null` stands for null.
- Integers are 64-bit and exact; floats are doubles and must be finite
  (NaN and the infinities are refused); `-0.0` keeps its sign.
- Strings must be UTF-8.
- Anything else is refused before anything is written: functions, userdata
  (but `mongostore.null`, int64 boxes and, in the document API's documents and
  `bson_encode`, the [BSON boxes](#bson-types)), cycles, mixed or sparse keys,
  nesting deeper than 100.

LuaJIT's numbers are doubles: an integer beyond 2^53 read there comes back as
a boxed `mongostore.int64`, and a box is written back as the exact integer.]],
  sections = {
    {
      title = "Marks",
      entries = {
        { field = "null", module = "mongostore", type = "mongostore.Null",
          desc = "The value that stands for null: the NULL light userdata, as lua-cjson's (compare with `==`)." },
        { class = "mongostore.Null", desc = "The type of `mongostore.null`." },
        { fn = "array", module = "mongostore",
          params = { { "t", "table?", "a list (or nothing, for a new empty one)" } },
          returns = { { "t", "table", "the same table, marked as an array" } },
          raises = "a `t` that is neither a table nor nil",
          desc = "Marks a table as an array, so it is stored as one even when empty.",
          example = [[
exe.context.items = mongostore.array()   -- stored as [], read back as a marked empty table]] },
        { fn = "is_array", module = "mongostore",
          params = { { "t", "any", "any value" } },
          returns = { { "yes", "boolean", "whether `t` is a table marked as an array" } },
          desc = "Arrays read from the store or decoded from JSON come back marked." },
      },
    },
    {
      title = "Integers",
      entries = {
        { fn = "int64", module = "mongostore",
          params = { { "v", "string|number|mongostore.Int64", "a decimal string, a number or a box" } },
          returns = { { "n", "integer|mongostore.Int64", "on Lua 5.4 a plain integer; on LuaJIT a box beyond 2^53" } },
          raises = "a `v` that is not an integer within int64",
          example = [[
local big = mongostore.int64("9007199254740993")]] },
        { class = "mongostore.Int64",
          desc = "(LuaJIT) A boxed 64-bit integer: `tostring`, `==`, `<` and `<=` between boxes, and "
            .. "`:tonumber()` (the nearest double)." },
      },
    },
    {
      title = "JSON",
      entries = {
        { fn = "json.encode", module = "mongostore",
          params = {
            { "v", "any", "a value under the value rules" },
            { "what", "string?", "what the value is, for messages", default = "\"value\"" },
          },
          returns = { { "text", "string", "its JSON" } },
          fails = { "invalid" },
          desc = "The core's codec: arrays stay arrays, `mongostore.null` is null, integers are exact." },
        { fn = "json.decode", module = "mongostore",
          params = {
            { "text", "string", "JSON text" },
            { "opts", "mongostore.JsonDecodeOptions?", "`exact`, `allow_duplicates`" },
          },
          returns = { { "v", "any", "the value: arrays marked, null as `mongostore.null`" } },
          fails = { "invalid" },
          raises = "a `text` that is not a string, an `opts` that is not a table, or `exact` and "
            .. "`allow_duplicates` together",
          desc = "A key repeated in one object is refused (`json: repeated key in object at byte N`): which "
            .. "of the two did the sender mean, and which one did a check before this reading see?" },
        { class = "mongostore.JsonDecodeOptions",
          desc = "The options of `json.decode`.",
          fields = {
            { "exact", "boolean?", "refuse, rather than change silently: integers outside int64 and nonzero "
              .. "numbers that would read as 0 (and, as always, keys repeated in one object)", default = "false" },
            { "allow_duplicates", "boolean?", "take a key repeated in one object, the last one winning, "
              .. "rather than refuse the text", default = "false" },
          } },
        { field = "json", module = "mongostore", type = "mongostore.JsonCodec", desc = "The JSON codec." },
        { class = "mongostore.JsonCodec", desc = "The type of `mongostore.json`: `encode` and `decode`." },
      },
    },
    {
      title = "Extended JSON",
      intro = [[
MongoDB Extended JSON (v2) for documents that hold boxes, for answers that
leave the process (an HTTP body) and documents that come from other tools
(`mongoexport`, other drivers). The text goes through libbson's own writer
and reader, the tables through the document API's codec, so the value rules
and the boxes are the ones everywhere else. The relaxed form writes numbers
as JSON numbers (an integer reads back as an int32 when it fits) and dates as
ISO-8601 text; the canonical form keeps every type (`{"$numberInt": "7"}`).
JavaScript code is written (`{"$code": ...}`) but not read: libbson 1.23's
reader mishandles it (it reads uninitialised memory on code in an array), so
text naming a `$code` key is refused before libbson sees it.]],
      entries = {
        { fn = "ejson.encode", module = "mongostore",
          params = {
            { "doc", "table", "a document (boxes and all)" },
            { "opts", "mongostore.EjsonEncodeOptions?", "`canonical`" },
          },
          returns = { { "text", "string", "its Extended JSON" } },
          fails = { "invalid" },
          raises = "a `doc` that is not a table, an `opts` that is not a table, or an unknown option",
          example = [[
local text = mongostore.ejson.encode({ _id = mongostore.objectid(), at = mongostore.date() })
-- { "_id" : { "$oid" : "..." }, "at" : { "$date" : "2026-12-01T15:04:05.123Z" } }]] },
        { class = "mongostore.EjsonEncodeOptions",
          desc = "The options of `ejson.encode`.",
          fields = {
            { "canonical", "boolean?", "the canonical form, which keeps every type", default = "false" },
          } },
        { fn = "ejson.decode", module = "mongostore",
          params = { { "text", "string", "one JSON object, white space around it allowed" } },
          returns = { { "doc", "table", "the document, as the document API reads one: `$oid`, `$date`, "
            .. "`$numberLong`, ... as their boxes or numbers, arrays marked, null as `mongostore.null`" } },
          fails = { "invalid", "too_large" },
          raises = "a `text` that is not a string" },
        { field = "ejson", module = "mongostore", type = "mongostore.EjsonCodec",
          desc = "The Extended JSON codec (`require \"mongostore.ejson\"`)." },
        { class = "mongostore.EjsonCodec", desc = "The type of `mongostore.ejson`: `encode` and `decode`." },
      },
    },
    {
      title = "How documents read and write",
      intro = [[
The document API ([documents](documents.md)), and `bson_decode(bytes,
{ document = true })`, read every BSON type, and write back what they read
unchanged:

- int32 and int64 come back as Lua integers (on LuaJIT as numbers, and as an
  `mongostore.Int64` box beyond 2^53), doubles as floats (on Lua 5.4 `1.0`
  stays a float); strings, booleans, documents and arrays (marked) as Lua has
  them, null as `mongostore.null`.
- Every other type comes back as a box (below): ObjectId, Date, Binary,
  Decimal128, Timestamp, Regex, MinKey, MaxKey and the legacy Code,
  CodeWScope, Symbol, Undefined and DBPointer, each written back as it came.
- Each table read remembers, in its metatable, the order of its fields and
  which numbers were int32s and which doubles. Written back, its fields go in
  that order (keys added since go after them), an int32 stays an int32 while
  its value fits, and a double stays a double even when integral (on LuaJIT
  every number is a double) or not finite (a NaN or an infinity another
  driver wrote goes back as it came; a new one is still refused). A field
  nothing remembers is written by its Lua type: an integer as an int64 (on
  LuaJIT an integral number), any other number as a double;
  `mongostore.int32(n)` writes an int32. Replacing the metatable
  (`setmetatable`, `mongostore.array`) forgets the order and types.

So a document another driver wrote, read with `find_one` and written back with
`replace_one`, is the same bytes. The document API and `bson_encode` take the
boxes; the store's writes and the JSON codec refuse them (`tostring` an
ObjectId to carry it). The store's loads, and `bson_decode` without
`document`, read the plain form: an
ObjectId as its hex, a date as epoch seconds, a binary or a decimal as a
string, a timestamp as an integer, the other types as `mongostore.null`.]],
      entries = {
        { fn = "int32", module = "mongostore",
          params = { { "n", "integer|mongostore.Int64", "an integer within -2^31 .. 2^31-1" } },
          returns = { { "v", "mongostore.Int32", "written as an int32" } },
          fails = { "invalid" },
          raises = "an `n` that is not a number or a box",
          desc = "Forces an int32 where the Lua value would be written as an int64. Read back, an int32 is "
            .. "a plain integer that remembers its type." },
        { class = "mongostore.Int32", desc = "An int32 to write: `tostring` gives its digits." },
        { method = "tonumber", of = "mongostore.Int32", params = {},
          returns = { { "n", "integer", "its value" } } },
      },
    },
    {
      title = "BSON types",
      intro = [[
The boxes stand for the BSON types Lua has none for. Each has `tostring` and
`==` (the same type and value); Dates, ObjectIds and Timestamps also compare
with `<` and `<=`. A constructor given a value of the right Lua type that the
type cannot hold returns `nil, msg, "invalid"`; a wrong Lua type raises, naming
the argument. A box's method called on another box raises.]],
      entries = {
        { fn = "objectid", module = "mongostore",
          params = { { "hex", "string?", "24 hex digits", default = "a new ObjectId" } },
          returns = { { "oid", "mongostore.ObjectId", "" } },
          fails = { "invalid" },
          raises = "a `hex` that is neither a string nor nil",
          example = [[
local id = mongostore.objectid()
assert(mongostore.objectid(id:hex()) == id)]] },
        { class = "mongostore.ObjectId", desc = "An ObjectId: `tostring` gives its 24 hex digits." },
        { method = "hex", of = "mongostore.ObjectId", params = {},
          returns = { { "hex", "string", "24 lower-case hex digits" } } },
        { method = "time", of = "mongostore.ObjectId", params = {},
          returns = { { "t", "integer", "epoch seconds it was made at (its first four bytes)" } } },
        { fn = "date", module = "mongostore",
          params = { { "ms", "integer?", "UTC milliseconds since the epoch (a number or an int64 box)",
                       default = "now" } },
          returns = { { "d", "mongostore.Date", "" } },
          fails = { "invalid" },
          raises = "an `ms` that is neither a number, a box nor nil",
          example = [[
print(mongostore.date(0))   -- 1970-01-01T00:00:00.000Z]] },
        { class = "mongostore.Date", desc = "A BSON date: `tostring` gives ISO-8601 in UTC with milliseconds." },
        { method = "ms", of = "mongostore.Date", params = {},
          returns = { { "ms", "integer|mongostore.Int64", "UTC milliseconds since the epoch" } } },
        { fn = "binary", module = "mongostore",
          params = {
            { "data", "string", "the bytes" },
            { "subtype", "integer?", "0 to 255 (4: UUID)", default = "0" },
          },
          returns = { { "bin", "mongostore.Binary", "" } },
          fails = { "invalid" },
          raises = "a `data` that is not a string, or a `subtype` that is not a number" },
        { class = "mongostore.Binary", desc = "Binary data: `tostring` gives `Binary(<subtype>, <n> bytes)`." },
        { method = "data", of = "mongostore.Binary", params = {},
          returns = { { "data", "string", "the bytes" } } },
        { method = "subtype", of = "mongostore.Binary", params = {},
          returns = { { "subtype", "integer", "0 to 255" } } },
        { fn = "decimal", module = "mongostore",
          params = { { "text", "string", "a decimal number (`\"1.10\"`, `\"-Infinity\"`, `\"NaN\"`)" } },
          returns = { { "dec", "mongostore.Decimal128", "" } },
          fails = { "invalid" },
          raises = "a `text` that is not a string" },
        { class = "mongostore.Decimal128",
          desc = "A Decimal128: `tostring` gives its text, exactly (`\"1.10\"` stays `1.10`)." },
        { fn = "timestamp", module = "mongostore",
          params = {
            { "t", "integer", "seconds, 0 to 2^32-1" },
            { "i", "integer", "the increment, 0 to 2^32-1" },
          },
          returns = { { "ts", "mongostore.Timestamp", "" } },
          fails = { "invalid" },
          raises = "a `t` or `i` that is not a number" },
        { class = "mongostore.Timestamp",
          desc = "A BSON timestamp (the oplog's): `tostring` gives `Timestamp(<t>, <i>)`." },
        { method = "t", of = "mongostore.Timestamp", params = {},
          returns = { { "t", "integer", "the seconds" } } },
        { method = "i", of = "mongostore.Timestamp", params = {},
          returns = { { "i", "integer", "the increment" } } },
        { fn = "regex", module = "mongostore",
          params = {
            { "pattern", "string", "the pattern (UTF-8, no NUL)" },
            { "flags", "string?", "distinct letters of `ilmsux`, kept in that order", default = "\"\"" },
          },
          returns = { { "re", "mongostore.Regex", "" } },
          fails = { "invalid" },
          raises = "a `pattern` that is not a string, or a `flags` that is neither a string nor nil" },
        { class = "mongostore.Regex", desc = "A BSON regular expression: `tostring` gives `/<pattern>/<flags>`." },
        { method = "pattern", of = "mongostore.Regex", params = {},
          returns = { { "pattern", "string", "" } } },
        { method = "flags", of = "mongostore.Regex", params = {},
          returns = { { "flags", "string", "sorted" } } },
        { fn = "code", module = "mongostore",
          params = {
            { "text", "string", "JavaScript code (UTF-8)" },
            { "scope", "table?", "its scope, a document: then the value is a CodeWScope" },
          },
          returns = { { "code", "mongostore.Code|mongostore.CodeWScope", "" } },
          fails = { "invalid" },
          raises = "a `text` that is not a string, or a `scope` that is neither a table nor nil" },
        { class = "mongostore.Code", desc = "(legacy) JavaScript code: `tostring` gives the code." },
        { method = "code", of = "mongostore.Code", params = {},
          returns = { { "text", "string", "the code" } } },
        { class = "mongostore.CodeWScope",
          desc = "(legacy) JavaScript code with a scope: `tostring` gives the code; the scope is kept as its "
            .. "bytes, so it writes back as it came." },
        { method = "code", of = "mongostore.CodeWScope", params = {},
          returns = { { "text", "string", "the code" } } },
        { method = "scope", of = "mongostore.CodeWScope", params = {},
          returns = { { "scope", "table", "the scope, read as a document" } } },
        { fn = "symbol", module = "mongostore",
          params = { { "text", "string", "the symbol (UTF-8)" } },
          returns = { { "sym", "mongostore.Symbol", "" } },
          fails = { "invalid" },
          raises = "a `text` that is not a string" },
        { class = "mongostore.Symbol", desc = "(legacy) A symbol: `tostring` gives its text." },
        { method = "symbol", of = "mongostore.Symbol", params = {},
          returns = { { "text", "string", "" } } },
        { fn = "dbpointer", module = "mongostore",
          params = {
            { "collection", "string", "the namespace (UTF-8, no NUL)" },
            { "id", "mongostore.ObjectId|string", "an ObjectId or its 24 hex digits" },
          },
          returns = { { "ptr", "mongostore.DBPointer", "" } },
          fails = { "invalid" },
          raises = "a `collection` that is not a string, or an `id` that is neither an ObjectId nor a string" },
        { class = "mongostore.DBPointer",
          desc = "(legacy) A DBPointer: `tostring` gives `DBPointer(<collection>, <hex>)`." },
        { method = "collection", of = "mongostore.DBPointer", params = {},
          returns = { { "collection", "string", "" } } },
        { method = "id", of = "mongostore.DBPointer", params = {},
          returns = { { "oid", "mongostore.ObjectId", "" } } },
        { field = "minkey", module = "mongostore", type = "mongostore.MinKey",
          desc = "MinKey, below every other value in the server's order; one value (`tostring`: `MinKey`)." },
        { class = "mongostore.MinKey", desc = "The type of `mongostore.minkey`." },
        { field = "maxkey", module = "mongostore", type = "mongostore.MaxKey",
          desc = "MaxKey, above every other value; one value (`tostring`: `MaxKey`)." },
        { class = "mongostore.MaxKey", desc = "The type of `mongostore.maxkey`." },
        { field = "undefined", module = "mongostore", type = "mongostore.Undefined",
          desc = "(legacy) BSON undefined, as other drivers read it; one value (`tostring`: `undefined`)." },
        { class = "mongostore.Undefined", desc = "The type of `mongostore.undefined`." },
      },
    },
    {
      title = "Without the C module",
      intro = [[
`local values = require "mongostore.values"` gives the same marks in pure Lua,
for code that must run where the C module cannot load (the interpreter does).
With the core loadable, `values.null` is `mongostore.null` and an array marked
by either is an array to both.]],
      entries = {
        { field = "null", module = "mongostore.values", type = "mongostore.Null",
          desc = "`mongostore.null` when the core loads; else a unique sentinel table that refuses fields." },
        { fn = "array", module = "mongostore.values",
          params = { { "t", "table?", "a list (or nothing, for a new empty one)" } },
          returns = { { "t", "table", "the same table, marked as an array" } },
          raises = "a `t` that is neither a table nor nil",
          desc = "As `mongostore.array`: replaces whatever metatable `t` had." },
        { fn = "is_array", module = "mongostore.values",
          params = { { "v", "any", "any value" } },
          returns = { { "yes", "boolean", "whether `v` is a table marked as an array" } } },
        { fn = "is_null", module = "mongostore.values",
          params = { { "v", "any", "any value" } },
          returns = { { "yes", "boolean", "whether `v` is null (nil is not: it is a missing value)" } } },
        { field = "has_core", module = "mongostore.values", type = "boolean",
          desc = "Whether the C core backs `null` here (it was loadable when this module first loaded)." },
      },
    },
    {
      title = "BSON and the text rule",
      entries = {
        { fn = "bson_encode", module = "mongostore.core",
          params = { { "doc", "table", "a table with string keys" } },
          returns = { { "bytes", "string", "its BSON" } },
          fails = { "invalid" },
          raises = "a `doc` that is not a table",
          desc = "The encoder every write uses, in the document API's form (boxes taken; a table read with "
            .. "`bson_decode(bytes, { document = true })` keeps its order and numeric types), for callers "
            .. "that keep documents of their own." },
        { fn = "bson_decode", module = "mongostore.core",
          params = {
            { "bytes", "string", "BSON bytes" },
            { "opts", "mongostore.BsonDecodeOptions?", "`document`" },
          },
          returns = { { "doc", "table", "the document under the value rules" } },
          fails = { "invalid" },
          raises = "a `bytes` that is not a string, or an `opts` that is neither a table nor nil",
          desc = "Refuses bytes that are not exactly one well-formed document." },
        { class = "mongostore.BsonDecodeOptions",
          desc = "The options of `bson_decode`.",
          fields = {
            { "document", "boolean?", "read as the document API does (boxes, and tables that remember their "
              .. "order and numeric types: [how documents read](#how-documents-read-and-write)) rather than "
              .. "the store's plain form", default = "false" },
          } },
        { fn = "text_error", module = "mongostore.core",
          params = { { "s", "any", "a candidate id, kind, path or filter value" } },
          returns = { { "why", "string?", "why it cannot serve (empty, not UTF-8, a NUL, longer than 16 KiB, "
            .. "not a string); nil when it can" } },
          desc = "The one text rule every call applies to ids, kinds, paths and filters." },
      },
    },
  },
}

------------------------------------------------------------------------
-- errors

api.pages[#api.pages + 1] = {
  file = "errors",
  title = "Errors",
  module = "mongostore",
  summary = "`nil, message, code`: what each code means and what a caller does about it.",
  intro = [[
An operation that fails at run time returns `nil, message, code` and never
raises; the message says what was being done (`commit <id>: ...`) and never
contains the URI's password. A wrong argument type, an unknown option or a
wrong chart is a programming mistake and raises, naming the function and the
argument.

`network` and `timeout` on a write mean the same thing to the caller: the write
may or may not have been applied, and the library never retries a write by
itself. Every write the engine makes can be repeated: a commit carries its
event's dedupe mark, so if the first attempt landed the retry is refused with
`duplicate`, and `engine:send` then returns `true`. So a caller that gets
`network` or `timeout` from `send` sends the same event again, with the same
`id`. `DURABILITY.md` states the guarantees.

The document API ([documents](documents.md)) adds a fourth value when the
server gave one: `nil, message, code, detail`, with `detail.server_code` the
server's own error code and `detail.labels` its error labels
(TransientTransactionError, UnknownTransactionCommitResult, ...). An error
labelled TransientTransactionError has the code `transient`, whatever else it
is; a duplicate key is `duplicate` with the key in the message.]],
  codes = true,  -- the table of api.codes, with the calls that return each
  sections = {
    {
      title = "The list",
      entries = {
        { field = "codes", module = "mongostore", type = "mongostore.ErrorCode[]",
          desc = "Every code, in the order of the list above." },
        { class = "mongostore.ErrorDetail",
          desc = "The fourth value of a failure of the document API, when there is something to say.",
          fields = {
            { "server_code", "integer?", "the server's error code (11000 for a duplicate key)" },
            { "labels", "string[]?", "the server's error labels, an array (empty when it gave none)" },
            { "cause", "mongostore.ErrorCode?", "(`db:transaction` giving up with `timeout`) the code of the "
              .. "last failure" },
            { "error", "any?", "(`db:transaction`, code `invalid`) the value `fn` raised" },
          } },
      },
    },
  },
}

------------------------------------------------------------------------
-- chart

api.pages[#api.pages + 1] = {
  file = "chart",
  title = "Charts",
  module = "mongostore.chart",
  summary = "`chart.define` and the chart definition format: states, transitions, timers, hooks, external kinds.",
  intro = [[
`local chart = require "mongostore.chart"`. A chart is a Lua table checked
once by `chart.define`, which raises an error naming the state path when
something is wrong (unknown target, missing initial, unreachable state,
duplicate name, selector without targets, ...). The result is immutable.

A state is `{ "Name", ... }`; names may not contain `.`, and a state's path
joins the names with dots (`Fulfilling.Picking`). Transitions live in the
`transitions` list of the state that encloses them; `from` and `to` name
states seen from there (a child, a dotted path below it, or a state further
out). The innermost enabled transition wins, then the first declared. A leaf
with no transition of its own is a sink: it finishes its parent with its
outcome.

A transition on an event without `to` is targetless (SCXML's transition
without a target, UML's internal transition): when taken, its action runs and
nothing else happens: no state is exited or entered, no hook runs, no timer
is re-armed, history stays; the event's outcome is `"transition"` and its
trace step goes from the state to itself. On a composite it handles the event
in every state below it, so an event counted in every state needs no
self-transition (which would leave and re-enter the state and re-arm its
timer); a state below that takes the event itself still wins. An automatic
transition (no `on`) and a join need a target. Only Lua charts have them:
harel's `.stm` documents give every transition a target (`from A to B ...`),
so `stm.to_chart` never makes one, and harel's own workers cannot run such a
chart. Hooks are called as `fn(context, event, act)`; an action that raises
leaves the execution `FAILED` (README.md, "Statecharts and the engine").]],
  sections = {
    {
      title = "Functions",
      entries = {
        { fn = "define", module = "mongostore.chart",
          params = { { "def", "mongostore.ChartDef", "the chart" } },
          returns = { { "c", "mongostore.Chart", "the compiled, immutable chart" } },
          raises = "anything wrong with the chart, naming the state path (`chart order: state Fork.A: ...`)",
          example = [[
local order = chart.define{
  id = "order", initial = "Cart", external = { "PlaceOrder", "Paid" },
  states = { { "Cart" }, { "AwaitingPayment", timeout = 900 }, { "Done", final = "success" } },
  transitions = {
    { from = "Cart", to = "AwaitingPayment", on = "PlaceOrder" },
    { from = "AwaitingPayment", to = "Done", on = "Paid" },
    { from = "AwaitingPayment", to = "Done", on = "Timeout" },
  },
}]] },
        { fn = "is_chart", module = "mongostore.chart",
          params = { { "v", "any", "any value" } },
          returns = { { "yes", "boolean", "whether `v` came from `chart.define`" } } },
        { fn = "is_external", module = "mongostore.chart",
          params = {
            { "c", "mongostore.Chart", "a chart" },
            { "kind", "string", "an event kind" },
          },
          returns = { { "yes", "boolean", "whether an event of this kind may come from outside" } },
          raises = "a `c` that is not a chart, or a `kind` that is not a string",
          desc = "A chart that declares `external` answers from its list; one that does not takes every kind "
            .. "but the reserved ones." },
        { fn = "external_kinds", module = "mongostore.chart",
          params = { { "c", "mongostore.Chart", "a chart" } },
          returns = { { "kinds", "string[]?", "the declared external kinds, sorted (a fresh list); nil when the "
            .. "chart declares none" } },
          raises = "a `c` that is not a chart" },
        { fn = "check_inputs", module = "mongostore.chart",
          params = {
            { "c", "mongostore.Chart", "a chart" },
            { "context", "table?", "a start's context" },
          },
          returns = { { "ok", "true", "the context fits the chart's inputs (always, for a chart without)" } },
          fails = { "invalid" },
          raises = "a `c` that is not a chart, or a `context` that is not a table",
          desc = "What `engine:start` (and so `msngx.start_external`) checks before anything is written: "
            .. "only declared fields, each of its type and bounds, and every required one given. Fails with "
            .. "`nil, message` (`opts.context.attempts is not an input of chart order`); the engine returns "
            .. "it as `nil, \"start: ...\", \"invalid\"`." },
        { fn = "inputs", module = "mongostore.chart",
          params = { { "c", "mongostore.Chart", "a chart" } },
          returns = { { "inputs", "table<string, mongostore.InputDef>?", "the declared inputs, normalised "
            .. "(a fresh table); nil when the chart declares none" } },
          raises = "a `c` that is not a chart" },
        { field = "RESERVED", module = "mongostore.chart", type = "table<string, true>",
          desc = "The kinds the engine gives meaning to: `Start`, `Finished`, `Timeout`, `Cancel`, `Reset`, "
            .. "`SetState`, `Terminate`, `Suspend`, `Resume`. A chart may handle `Cancel`, `Timeout` and "
            .. "`Finished` with transitions; none may be declared external." },
        { class = "mongostore.Chart",
          desc = "A compiled chart; assigning to it raises.",
          fields = { { "id", "string", "the chart's id (what executions name as `definition_id`)" } } },
      },
    },
    {
      title = "The definition format",
      entries = {
        { class = "mongostore.ChartDef",
          desc = "What `chart.define` takes; an unknown key raises.",
          fields = {
            { "id", "string", "the chart's id" },
            { "initial", "string", "the first state" },
            { "states", "mongostore.StateDef[]", "the top-level states" },
            { "transitions", "mongostore.TransitionDef[]?", "transitions between top-level states" },
            { "history", "boolean?", "false: the top level has no history", default = "true" },
            { "external", "string[]?", "the kinds that may come from outside; each must be handled by some "
              .. "transition, and none may be reserved" },
            { "dialect", "\"mongostore\"|\"harel\"?", "how children run (a .stm chart's is harel's): under "
              .. "\"harel\" a finished child reports its outcome with its `carry` keys beside it (not its whole "
              .. "context as `result`), `region_results` take that form and are set only when a child reported "
              .. "something, a finished region rests on its final state, and while regions run a domain event "
              .. "sent to the parent goes to them, with its own id, before any transition of the parent's",
              default = "\"mongostore\"" },
            { "carry", "string[]?", "the context keys an invoked execution of this chart carries back, under "
              .. "dialect = \"harel\"" },
            { "inputs", "table<string, string|mongostore.InputDef>?", "the context fields a start may set: "
              .. "name = a type (`\"number\"`, `\"string?\"`: the `?` makes it optional) or an `InputDef`. A chart "
              .. "that declares inputs is started only with declared fields of their types (else `invalid`, "
              .. "nothing written); one without takes any context. A wrong declaration raises" },
          } },
        { class = "mongostore.InputDef",
          desc = "One declared input; an unknown key raises.",
          fields = {
            { "type", "string", "`string`, `number` (finite), `integer`, `boolean`, `object` or `array`" },
            { "optional", "boolean?", "may be left out", default = "false" },
            { "min", "number?", "the least value (numbers)" },
            { "max", "number?", "the greatest value (numbers)" },
            { "max_length", "integer?", "at most this many bytes (strings) or items (arrays)" },
          } },
        { class = "mongostore.StateDef",
          desc = "A state: `{ \"Name\", ... }`; an unknown key raises.",
          fields = {
            { "[1]", "string", "the name (no `.`)" },
            { "states", "mongostore.StateDef[]?", "children: a composite (or, with `orthogonal`, regions)" },
            { "initial", "string?", "the first child of a composite" },
            { "transitions", "mongostore.TransitionDef[]?", "transitions among the children" },
            { "orthogonal", "boolean?", "its states are regions that run at once, each a forked child execution" },
            { "final", "string|true?", "a final state, with its outcome" },
            { "timeout", "number|{ context: string }?", "seconds (or the context key holding them) before a "
              .. "`Timeout` event; a durable timer armed on entry, cancelled on exit" },
            { "on_enter", "fun(context: table, event: mongostore.Event, act: mongostore.Act)?", "hook run on entry" },
            { "on_exit", "fun(context: table, event: mongostore.Event, act: mongostore.Act)?", "hook run on exit" },
            { "on_activity", "fun(context: table, event: mongostore.Event, act: mongostore.Act)?",
              "hook run, on the active state, for an event no transition takes and the state does not defer" },
            { "defer", "string[]?", "kinds held while nothing handles them, until a state that does is entered" },
            { "history", "boolean?", "false: enter at the initial state, not the remembered one", default = "true" },
            { "invoke", "string?", "a leaf that runs the chart of this id as a child execution and waits for it; "
              .. "its result comes back as a `Returned` event (`data.outcome` and what it reported)" },
            { "with", "table<string, string>?", "child key -> parent key: what an invoked child (or, on an "
              .. "orthogonal state, each region) starts with", default = "an invoked child: nothing; a region: a "
              .. "copy of the whole context" },
            { "each", "string?", "with `invoke`: the context list to fan out over, one child per entry, joined "
              .. "like regions" },
            { "as", "string?", "with `each`: the name an entry goes by in `with`; without `with`, each child gets "
              .. "its entry under this key" },
            { "carry", "string[]?", "on a region: the context keys it carries back under the chart's "
              .. "dialect = \"harel\"" },
          } },
        { class = "mongostore.TransitionDef",
          desc = "A transition; an unknown key raises.",
          fields = {
            { "from", "string", "the source state" },
            { "to", "string|table<string, string>?", "the target, or (with `select`) targets by key; none, "
              .. "with `on`: a targetless transition (its action runs, no state is left)" },
            { "on", "string|string[]?", "the event kind(s); none: an automatic transition" },
            { "where", "fun(data: table, context: table, event: mongostore.Event): boolean?", "the guard" },
            { "select", "fun(context: table, event: mongostore.Event): string?", "picks a key of `to`" },
            { "action", "fun(context: table, event: mongostore.Event, act: mongostore.Act)?",
              "runs between the exits and the entries (of a targetless transition: alone)" },
            { "join", "\"all\"|\"any\"?", "out of an orthogonal state (or an invoke with `each`): when every "
              .. "region or child (or the first) has finished", default = "\"all\"" },
            { "else_to", "string?", "the join's target when a finished region's outcome is neither "
              .. "`success` nor nil" },
          } },
        { class = "mongostore.Act",
          desc = "What a hook gets as its third argument.",
          fields = {
            { "emit", "fun(target_id: string?, kind: string, data: table?)", "queues an event in this commit's "
              .. "outbox; `target_id` nil: an external event" },
            { "idempotency_key", "string", "`<id>:<version>:<n>`, the same when the step is applied again" },
            { "execution_id", "string", "" },
            { "parent_id", "string?", "" },
            { "now", "number", "epoch seconds of this step" },
          } },
      },
    },
    {
      title = "Diagrams",
      intro = [[
`diagram.to_dot` (Graphviz) and `diagram.to_mermaid` (a Mermaid `stateDiagram-v2`)
draw a chart: composites as clusters (Mermaid composites), the regions of an
orthogonal state dashed (split by `--`), an initial dot in each composite,
finals with a double border and their outcome, timeouts (seconds or the
context key), deferred kinds and hooks under the state's name; transitions
labelled `Event | Other [guard] / action`, a selector as a choice node with one
edge per key, a join as a bar with its `success` and dashed `else` edges, a
targetless transition as a line in its state (`Use / action (internal)`),
with no edge.
Given executions or traces, they highlight where each execution is (its state
filled, the states around it bold; a `FAILED` one in red), the states passed
(pale) and every transition taken, numbered in the order taken: a trace step
is matched to the transition its event enables from the state it left
(innermost first, as the engine picks), then any automatic ones, ending where
the step ended. The regions' child executions and their traces go in the same
lists as the parent's. The text is the same for the same chart and options in
every process (keys, kinds and lists sorted), and every label is escaped for
its format (quotes, brackets, braces, newlines, non-ASCII, invalid UTF-8), so
no state name, event kind or outcome can end a label or add a statement.
`tools/render-order-chart` draws the README's chart into `docs/order_chart.svg`.]],
      entries = {
        { fn = "to_dot", module = "mongostore.diagram",
          params = {
            { "c", "mongostore.Chart", "a chart" },
            { "opts", "mongostore.DiagramOptions?", "what to highlight and how to lay it out" },
          },
          returns = { { "text", "string", "a Graphviz `digraph` (render with `dot -Tsvg`); taken edges and "
            .. "highlighted states carry an SVG `class` (`taken`, `current`, `failed`, `visited`)" } },
          fails = { "invalid" },
          raises = "a `c` that is not a chart, an `opts` that is not a table, an unknown option or a wrong type "
            .. "for one",
          desc = "Fails `invalid` when an execution runs another chart, or an execution or a trace step names a "
            .. "state the chart does not have (a trace of an older version of the chart).",
          example = [[
local svg = io.popen("dot -Tsvg -o order.svg", "w")
svg:write(assert(diagram.to_dot(order, { execution = exe, trace = assert(store:read_trace(exe.id)) })))
svg:close()]] },
        { fn = "to_mermaid", module = "mongostore.diagram",
          params = {
            { "c", "mongostore.Chart", "a chart" },
            { "opts", "mongostore.DiagramOptions?", "what to highlight and how to lay it out" },
          },
          returns = { { "text", "string", "a Mermaid `stateDiagram-v2`, pure ASCII: every character but letters, "
            .. "digits, space and `_` in a label is a `#NNN;` entity; highlighted states get the classes "
            .. "`current`, `failed`, `active` and `visited`, taken transitions their order numbers in their label" } },
          fails = { "invalid" },
          raises = "a `c` that is not a chart, an `opts` that is not a table, an unknown option or a wrong type "
            .. "for one",
          desc = "Mermaid's own parser (mermaid 11) takes every diagram it writes: `tools/mermaid/check FILE...`." },
        { class = "mongostore.DiagramOptions",
          desc = "What `diagram.to_dot` and `diagram.to_mermaid` take; an unknown key raises.",
          fields = {
            { "execution", "mongostore.Execution|mongostore.Execution[]?", "where it is: an execution of the "
              .. "chart (as `store:load` gives it), or a list (the parent and its regions' children)" },
            { "executions", "mongostore.Execution[]?", "more executions, highlighted the same way" },
            { "trace", "mongostore.TraceStep[]|mongostore.TraceStep[][]?", "the path: a trace as "
              .. "`store:read_trace` gives it, or a list of traces; steps of several traces are numbered by "
              .. "their `at`, then in the order the traces are given. With no execution, each trace's last step "
              .. "says where it is" },
            { "traces", "mongostore.TraceStep[][]?", "more traces" },
            { "names", "table<function, string>?", "names for the chart's functions: guards, selectors, "
              .. "actions and hooks (`[guard]`, `entry` otherwise)" },
            { "direction", "\"TB\"|\"LR\"|\"BT\"|\"RL\"?", "the layout's direction", default = "\"TB\"" },
            { "title", "string|false?", "a title above the diagram (DOT: the chart's id unless false; Mermaid: "
              .. "none unless given, in the front matter)" },
          } },
      },
    },
    {
      title = "harel's .stm charts",
      intro = [[
`stm.to_chart` reads a machine of harel's `.stm` DSL (harel 0.9.0,
`harel/dsl/grammar.lark`) into a chart, through `mongostore.stm` (LPeg). Each
construct becomes what `chart.define` takes: `state`, `orthogonal` (its
regions), `final NAME VERDICT` (`final = "VERDICT"`; `outcome` on a leaf is the
same), `initial`, `on enter|exit|activity ACTION(key: value, ...)` (hooks
called as `fn(context, event, act, inputs)`), `timeout N` and `timeout context
KEY`, `defer`, `no history`, `from A to B on K | L where PREDICATE set
context.x = EXPR, ...` (the guard reads the event's fields bare or as
`event.x`, and `context.x`; `set` is evaluated as the transition starts and
applied between the exits and the entries), `choose { when P to X set ...
else to Y }` (the first branch that holds; with no branch holding and no
`else` the transition is not enabled), `select FN returns {...} { VALUE to X
else to Y }` (the result keyed as Python's `str` prints it: `true` is
`True`, `1.0` is `1.0`; a result no branch takes and no `else` fails the
execution), `join all|any to X else to Y` (once every region has finished: X
when all, or any, ended with outcome `success`, as harel's `join_success`
decides; an outcome of nil is not a success there), `guard NAME = PREDICATE`,
`bind { handler = module.fn }`, `event KIND { field: int|float|string|bool|any[?] }`,
and `fragment F(p: action|state|guard|value|event, ...) { ... }` with `use
F(p = ...) as Name` (expanded as harel's loader does: a child state named by
the alias, its parameters filled in, nested uses forwarding them), and `import
"file.stm" [as alias]` with `opts.base_dir` (each file read once, relative to
the one importing it; its events, bindings, guards and fragments merged in,
the fragments named `alias.F` under an alias, all in one space as in harel),
`invoke NAME [for V in LIST] with { child: parent ... }` (`invoke`, `each`,
`as` and `with`: NAME is the id of a chart registered with the engine, so
read each machine with its own `stm.to_chart(text, { machine = NAME })`; an
inline `invoke [for V in LIST] { ... }` body becomes a chart of its own,
`stm.submachines`, registered with its machine by the engine;
`on Returned where outcome == ...` routes on the child's result) and `carry
KEY, ...` (what a region or an invoked machine reports back). A .stm chart
runs harel's conventions for children: a region starts with what the
orthogonal state's `with` passes (nothing without one), and a child reports
its outcome with its carried keys (`dialect = "harel"` in `chart.define`,
which also gives an event sent to a parent with live regions to the regions
first, as harel's runner does). An action is
found in `opts.actions` by its handler name, then by the path a `bind` gives it
(or the literal dotted path), then as the field of the module `require` finds;
`opts.guards` overrides a `guard` declaration.

Every error raises `stm: line L, column C: message` (`stm: FILE: line L, ...`
in an imported file) followed by the line and a caret; harel's parser fails the same texts at the same place
(`spec/02-store/stm_harel_spec.lua`). What mongostore's engine cannot run is
refused by name, never dropped:
`import` without `base_dir`, `cancel_on_failure`,
`ttl`, a typed `context` block, `on error` and `on Expired`,
`outcome` on a composite state, and hooks, a timeout, `defer` or `outcome` on
the machine itself. A declared event's fields are checked by
`stm.check_event`.]],
      entries = {
        { class = "mongostore.StmOptions",
          desc = "What `stm.to_chart` takes; an unknown key raises.",
          fields = {
            { "actions", "table<string, function>?", "hooks and selectors by handler name or dotted path: "
              .. "hooks as `fn(context, event, act, inputs)`, selectors as `fn(context, event, inputs)`" },
            { "guards", "table<string, fun(data: table, context: table, event: mongostore.Event?): boolean>?",
              "named guards in Lua, over the text's `guard` declarations" },
            { "machine", "string?", "the machine to read, when the text declares several" },
            { "id", "string?", "the chart's id", default = "the machine's name" },
            { "base_dir", "string?", "the directory `import`s are read from (without it, an import is refused). "
              .. "An import names a `.stm` file relative to the importing one; an absolute path, a `..` leading "
              .. "out of `base_dir` and the import paths, a file that is not `.stm` or not a regular file are "
              .. "refused, and nothing of a file that is not `.stm` is read (so no error quotes it)" },
            { "import_paths", "string[]?", "more directories an import is looked up in (after the importing "
              .. "file's own) and may be read from" },
            { "max_import_bytes", "integer?", "the largest file an import reads", default = "1048576" },
          } },
        { fn = "check_event", module = "mongostore.stm",
          params = {
            { "c", "mongostore.Chart", "a chart from `stm.to_chart`" },
            { "kind", "string", "an event kind" },
            { "data", "table?", "its data" },
          },
          returns = { { "ok", "true", "the data fits the fields the text declared for the kind (an undeclared kind, "
            .. "or a reserved one, is not checked; undeclared fields are allowed)" } },
          fails = { "invalid" },
          raises = "a `c` that is not a chart, a `kind` that is not a string, a `data` that is not a table" },
        { fn = "submachines", module = "mongostore.stm",
          params = { { "c", "mongostore.Chart", "a chart" } },
          returns = { { "charts", "mongostore.Chart[]", "the charts of its inline `invoke { ... }` bodies, nested ones "
            .. "included, with harel's ids (`<machine>#<state path>`); empty for any other chart" } },
          raises = "a `c` that is not a chart",
          desc = "`engine.new` and `engine:register` register these with the chart, so its inline invokes run." },
        { fn = "events", module = "mongostore.stm",
          params = { { "c", "mongostore.Chart", "a chart" } },
          returns = { { "events", "table<string, table<string, { type: string, required: boolean }>>?",
            "the declared events and their fields (a copy); nil when the text declared none" } },
          raises = "a `c` that is not a chart" },
        { fn = "to_chart", module = "mongostore.stm",
          params = {
            { "text", "string", "the `.stm` text" },
            { "opts", "mongostore.StmOptions?", "the actions and guards in Lua, which machine, the chart's id" },
          },
          returns = { { "c", "mongostore.Chart", "the chart, as `chart.define` makes it" } },
          raises = "a text harel's grammar does not take, an unbound action or guard, a construct the engine cannot "
            .. "run (by name), or what `chart.define` refuses, each as `stm: line L, column C: ...`; wrong argument "
            .. "types, naming the argument",
          example = [[
local c = stm.to_chart([=[
event Paid { amount: float }
machine order {
  initial Cart
  state Cart { on enter greet(channel: "email") }
  final Done success
  from Cart to Done on Paid where amount > 0
}]=], { actions = { greet = function(context, event, act, inputs) context.greeted = inputs.channel end } })]] },
        { fn = "expand", module = "mongostore.stm",
          params = {
            { "text", "string", "the `.stm` text" },
            { "opts", "mongostore.StmOptions?", "which machine, the actions and guards (as `stm.to_chart`)" },
          },
          returns = { { "machine", "table", "the machine's config as harel's loader resolves it: actions as "
            .. "`{ function = path or Lua function, inputs = {...} }`, named guards inlined, each `use` expanded "
            .. "into a child state; the program's `events` beside" } },
          raises = "as `stm.to_chart`, for an unbound action, guard or parameter and a wrong `use`" },
        { fn = "normalize", module = "mongostore.stm",
          params = { { "text", "string", "the `.stm` text" } },
          returns = { { "program", "table", "the program in harel's normal form: `machines`, `fragments`, "
            .. "`events`, `bindings`, `guards`, `imports` and `positions`, each machine the config table harel's "
            .. "parser builds (positions as `{ line, column }`, predicates as trees)" } },
          raises = "a text harel's grammar does not take, as `stm: line L, column C: ...`" },
        { fn = "parse", module = "mongostore.stm",
          params = { { "text", "string", "the `.stm` text" } },
          returns = { { "program", "table", "as `stm.normalize`" } },
          raises = "as `stm.normalize`" },
      },
    },
  },
}

------------------------------------------------------------------------
-- engine

api.pages[#api.pages + 1] = {
  file = "engine",
  title = "The engine",
  module = "mongostore.engine",
  summary = "`engine.new`: start, send, the relays, the timer sweep, the worker loop and the control calls.",
  intro = [[
`local engine = require("mongostore.engine").new{ store = store, charts = { order } }`.
Every delivered event is one `load` by `_id`, the interpreter and one
`commit` that carries the emits, the dedupe mark, the timer changes, the
spawns and (with `trace = true`) a trace step. A conflict reloads and retries;
a redelivered event is refused by dedupe and changes nothing. The relays and
the sweep only repeat work that is idempotent, so several worker processes can
share a database, and what a killed worker left is finished by the others or
by itself on restart (`engine:recover()`).

What the engine takes from a caller is checked whole before anything is sent:
a wrong Lua type raises (`send: event.kind must be a string, got number`); a
bad value (an empty or non-UTF-8 id or kind, data the value rules cannot
store, an unknown chart, a priority outside 0..4, event data or a start's
context nested deeper than `engine.MAX_EVENT_DEPTH` levels, a context field
the chart's `inputs` do not declare or of the wrong type) is `nil, msg,
"invalid"`, and an event larger than `max_event_bytes` is `"too_large"`. Then
nothing is written and no hook has run.]],
  sections = {
    {
      title = "Making one",
      entries = {
        { fn = "new", module = "mongostore.engine",
          params = { { "opts", "mongostore.EngineOptions", "the store, the charts and the settings" } },
          returns = { { "engine", "mongostore.Engine", "" } },
          raises = "a missing store, a chart that did not come from `chart.define`, an option of the wrong "
            .. "type or out of range, or an unknown option" },
        { field = "MAX_EVENT_DEPTH", module = "mongostore.engine", type = "integer",
          desc = "80: how deep an event's data (itself level 1) or a start's context may nest. Deeper is "
            .. "`invalid`, refused before anything is written, so that whatever was accepted can be read "
            .. "back: held in an execution, loaded through `mongostore.ngx`'s thread crossing and sent in an "
            .. "HTTP answer, each adding levels under the codecs' limit of 100." },
        { class = "mongostore.EngineOptions",
          desc = "The options of `engine.new`; an unknown key raises.",
          fields = {
            { "store", "mongostore.Store", "from `mongostore.connect`" },
            { "charts", "mongostore.Chart[]?", "the charts it runs (more with `engine:register`)" },
            { "trace", "boolean?", "write a trace step with every commit", default = "false" },
            { "now", "fun(): number?", "the clock", default = "`mongostore.now`" },
            { "max_conflicts", "integer?", "reloads of one event before giving up with `conflict`", default = "50" },
            { "max_attempts", "integer?", "deliveries of an outbox entry to a target that does not exist "
              .. "before it goes to `on_dead_letter`", default = "100" },
            { "max_event_bytes", "integer?", "the largest event (its JSON) `send` takes", default = "1048576" },
            { "batch", "integer?", "entries a relay pass claims", default = "100" },
            { "batch_delivery", "boolean?", "a relay pass delivers its entries together: one load of every "
              .. "target, one bulk write of the commits, one of the acks (see `send_many`); false delivers them "
              .. "one at a time", default = "true" },
            { "lease", "number?", "seconds a claimed entry (or an inbox claim) is this worker's", default = "10" },
            { "inbox", "boolean?", "`step` and `run` also run the inbox pass (`relay_inbox`), so what "
              .. "`enqueue` accepts is delivered; `run` backs off while the inbox is idle (50 ms doubling up to "
              .. "1 s: an idle worker pays the claim's find at most once a second), `step` always runs it; "
              .. "`false` opts out", default = "true" },
            { "inbox_max_events", "integer?", "the queued events one inbox pass takes at most", default = "1000" },
            { "inbox_group", "integer?", "the queued events of one execution the inbox applies in one commit at "
              .. "most (1 to 256): applied in order in memory under one version check, each marked processed in "
              .. "the same update; a group that does not land is applied again one event at a time",
              default = "32" },
            { "sweep_batch", "integer?", "the documents with due timers `sweep` reads and fires together at most: "
              .. "one load, bulk writes of the Timeouts, at most one bulk delete of timers per page",
              default = "500" },
            { "cache_size", "integer?", "entries each per-process cache holds (a parent's chart id for the spawn "
              .. "relay, an outbox entry's failed deliveries); least recently used go first", default = "10000" },
            { "on_external", "fun(entry: mongostore.OutboxEntry)?", "receives emitted events with no target; "
              .. "a raise is logged and the entry is tried again after a wait of its own (0.5 s doubled per "
              .. "failure up to 60 s, with jitter), given up after `max_attempts`. An engine without it "
              .. "(the CLI's) never claims external entries: they stay pending for a worker that has one, "
              .. "which its log says once" },
            { "on_dead_letter", "fun(entry: mongostore.OutboxEntry, err: string)?", "receives entries given up "
              .. "on", default = "log them and keep them in `outbox_failed` (`store:failed_outbox`, `mongostore "
              .. "outbox --failed`)" },
            { "log", "fun(msg: string)?", "where the engine reports what it carries on through",
              default = "stderr" },
          } },
        { method = "register", of = "mongostore.Engine",
          params = { { "c", "mongostore.Chart", "a chart" } },
          returns = {},
          raises = "a `c` that is not a chart",
          desc = "Adds a chart after construction." },
        { method = "chart_of", of = "mongostore.Engine",
          params = { { "exe", "mongostore.Execution", "an execution" } },
          returns = { { "mongostore.Chart?", "the registered chart it runs, or nil" } },
          desc = "The chart an execution runs: by its `definition_id`, else by the name it was invoked by "
            .. "(`definition_fqn`, what harel's runner records on a child it started for an invoke)." },
        { class = "mongostore.Engine", desc = "An engine, from `engine.new`." },
      },
    },
    {
      title = "Starting and sending",
      entries = {
        { method = "start", of = "mongostore.Engine",
          params = {
            { "chart_id", "string", "the chart to run" },
            { "opts", "mongostore.StartOptions?", "the id, context and priority" },
          },
          returns = {
            { "id", "string", "the execution's id" },
            { "created", "boolean", "true when this call created it; false when it existed (no second Start)" },
            { "result", "mongostore.DeliveryResult", "what Start did; outcome `duplicate` when it existed" },
          },
          fails = fails("conflict", "invalid", "too_large"),
          raises = "a wrong type for an argument or an option, or an unknown option",
          desc = [[
Creates the execution and applies `Start` in the same first commit. The same
id again is the same execution; an id that holds another chart's execution is
a `conflict`. A context value that a state's `timeout = { context = "key" }`
reads is checked here, before anything is written: it must be a number of
seconds (>= 0, finite), or the start is `invalid` (a key left out is not
refused, since a hook may set it before the state is entered).]],
          example = [[
local id = engine:start("order", { id = "o-1", context = { total = 30 } })]] },
        { class = "mongostore.StartOptions",
          desc = "The options of `engine:start`; an unknown key raises.",
          fields = {
            { "id", "string?", "the execution's id", default = "`mongostore.uuid()`" },
            { "context", "table<string, any>?", "the starting context", default = "{}" },
            { "priority", "integer?", "0 to 4", default = "0" },
          } },
        { method = "send", of = "mongostore.Engine",
          params = {
            { "id", "string", "the execution" },
            { "event", "mongostore.Event", "the event; a missing `id` is filled into this table" },
          },
          returns = {
            { "ok", "true", "" },
            { "how", "\"applied\"|\"duplicate\"", "applied now, or handled before (nothing changed)" },
            { "result", "mongostore.DeliveryResult", "what the event did, and the execution after it" },
          },
          fails = fails("not_found", "conflict", "invalid", "too_large"),
          raises = "a wrong type for `id`, the event or one of its fields",
          desc = [[
Applies the event once per event id: sending the same id again changes
nothing. After `network` or `timeout`, send the same event again (same `id`).
`how` says whether this call committed; `result.outcome` says what the event
did: a transition, nothing (`ignored`: no transition takes it, its guard said
no, a misspelt kind), `held`, `failed` (the execution is now FAILED, `error`
says why), `finished` (the execution had ended before). An event that changes
nothing is still committed as processed, one version and its dedupe mark, as
harel does, so that sending it again is a `duplicate`; its trace step says
`outcome = "ignored"`, which tells it from a self-transition (`"transition"`).]],
          example = [[
engine:send("o-1", { kind = "PlaceOrder", data = {}, id = "evt-1" })]] },
        { method = "send_many", of = "mongostore.Engine",
          params = {
            { "list", "{ [1]: string, [2]: mongostore.Event }[]", "pairs of an execution id and an event" },
          },
          returns = { { "results", "mongostore.SendResult[]", "one per pair, in order" } },
          raises = "a `list` that is not a list of pairs, or a wrong type for an id or an event field",
          desc = [[
`send` for many events in a few round trips: one find loads every distinct
execution, the interpreter applies each event, and one bulk write carries the
commits, each the one-event commit (its own version check, dedupe mark and
trace step). Events for one execution are applied in list order, each in a
commit of its own; a commit that loses falls back to `send`'s path for that
event alone; after an event that fails, that execution's later events are not
attempted (`blocked`), so none overtakes one sent before it. A bad pair is
refused on its own.]],
          example = [[
for i, r in ipairs(engine:send_many{ { "o-1", { kind = "Pay", id = "p-1" } },
                                     { "o-2", { kind = "Pay", id = "p-2" } } }) do
  if not r.ok then print(i, r.code, r.message) end
end]] },
        { class = "mongostore.DeliveryResult",
          desc = [[
What a delivered event did: the third value of `send`, `start` and the
control calls (and of their `msngx.*` forms), `result` of a `send_many` item.]],
          fields = {
            { "outcome", "\"transition\"|\"ignored\"|\"held\"|\"forwarded\"|\"failed\"|\"finished\"|\"duplicate\"",
              "`transition`: a transition was taken or the status changed (Start, Cancel, Suspend, ...); "
              .. "`ignored`: nothing changed; `held`: deferred by the active state, or held while suspended; "
              .. "`forwarded`: handed to the live regions or invoked children; `failed`: a hook, guard, action "
              .. "or timer raised and the execution is FAILED; `finished`: the execution was DONE, FAILED or "
              .. "CANCELLED before; `duplicate`: handled before, nothing changed (the rest is the execution as "
              .. "loaded)" },
            { "status", "mongostore.Status", "the status after the commit" },
            { "active_path", "string?", "the active state after the commit" },
            { "error", "string?", "the error of a FAILED execution" },
          } },
        { class = "mongostore.SendResult",
          desc = "The outcome of one pair of `send_many`.",
          fields = {
            { "ok", "true?", "applied now, or handled before" },
            { "how", "\"applied\"|\"duplicate\"?", "with `ok`" },
            { "result", "mongostore.DeliveryResult?", "with `ok`: what the event did" },
            { "index", "integer?", "not applied: the pair's index in `list`" },
            { "message", "string?", "why not" },
            { "code", "string?", "the code of `message`" },
            { "detail", "table?", "what else the failure knows" },
            { "blocked", "true?", "not attempted: an earlier event for the same execution failed" },
          } },
        { method = "enqueue", of = "mongostore.Engine",
          params = {
            { "id", "string", "the execution (it need not exist yet)" },
            { "event", "mongostore.Event", "the event; a missing `id` is filled into this table" },
            { "opts", "mongostore.EnqueueOptions?", "the priority" },
          },
          returns = {
            { "ok", "true", "" },
            { "how", "\"queued\"|\"duplicate\"", "queued now, or queued before under the same event id (one "
              .. "entry)" },
          },
          fails = fails("conflict", "invalid", "too_large"),
          raises = "a wrong type for `id`, the event or one of its fields, or `opts`; an unknown option",
          desc = [[
Hands the event to the inbox in one insert, without loading the execution or
knowing its chart: a worker's inbox pass (`relay_inbox`, or `step`/`run` with
`inbox = true`) delivers it. The event is checked as `send` checks it, except
against a chart's declared event types. The event id is the entry's key: the
same event enqueued twice is one entry (`"duplicate"`), and an id queued for
another execution is a `conflict`; once delivered, the execution's dedupe
refuses it again. Events of one producer reach an execution in the order it
enqueued them.]],
          example = [[
engine:enqueue("o-1", { kind = "Paid", data = { amount = 30 }, id = "pay-1" }, { priority = 3 })]] },
        { class = "mongostore.EnqueueOptions",
          desc = "The options of `engine:enqueue`; an unknown key raises.",
          fields = {
            { "priority", "integer?", "0 (normal) to 4 (the most urgent), as harel's: an inbox pass takes the "
              .. "executions whose queued events are most urgent first, the oldest first within a priority",
              default = "0" },
          } },
      },
    },
    {
      title = "Relays, sweep and the worker loop",
      entries = {
        { method = "step", of = "mongostore.Engine", params = {},
          returns = { { "n", "integer", "items handled" } },
          desc = "One pass: the spawn relay, the outbox relay, then the due timers." },
        { method = "run", of = "mongostore.Engine",
          params = { { "opts", "mongostore.RunOptions?", "when to stop and how long to idle" } },
          returns = {},
          raises = "a wrong type for an option, or an unknown option",
          desc = [[
The worker loop: relays as long as there is work, sleeps when there is none,
and sweeps timers at least every `sweep_interval` even under load. The client
pool reconnects in the background, so it goes on through resets and restarts
of the server.]],
          example = [[
engine:run{ stop = function() return stopping end, idle_sleep = 0.05, sweep_interval = 1 }]] },
        { class = "mongostore.RunOptions",
          desc = "The options of `engine:run`; an unknown key raises.",
          fields = {
            { "stop", "fun(): boolean?", "asked before each pass; true ends the loop", default = "never" },
            { "idle_sleep", "number?", "seconds to sleep when a pass found nothing", default = "0.05" },
            { "sweep_interval", "number?", "seconds between timer sweeps", default = "1" },
          } },
        { method = "recover", of = "mongostore.Engine",
          params = { { "max_passes", "integer?", "at most this many passes (>= 1)", default = "100" } },
          returns = { { "n", "integer", "items handled" } },
          raises = "a `max_passes` that is not a number >= 1",
          desc = "Steps until a pass finds nothing: drains what a crash left in the spawns, the outbox and "
            .. "the timers." },
        { method = "relay_spawns", of = "mongostore.Engine", params = {},
          returns = { { "n", "integer", "entries handled" } },
          desc = "Claims pending spawns and creates each child (an existing child is left as it is)." },
        { method = "relay_outbox", of = "mongostore.Engine", params = {},
          returns = { { "n", "integer", "entries handled" } },
          desc = [[
Claims pending outbox entries and delivers each, in order per target; a target
that does not exist yet is retried on later passes and given up after
`max_attempts`. Events without a target go to `on_external`, one after
another, until half the lease has passed (the rest is given back for the next
pass, so the pass's acks land while its claims hold); an engine without one
leaves them pending (it claims only targeted entries), for an engine that has
one or a loop on `claim_external`. With
`batch_delivery` (the default) the pass delivers its entries as `send_many`
does and acks them in one bulk write, applying events only in the first half
of its lease (what is left waits for the next pass), so that its acks land
while its claims hold.]] },
        { method = "claim_external", of = "mongostore.Engine",
          params = { { "limit", "integer?", "claim at least this many entries (>= 1)", default = "batch" } },
          returns = { { "entries", "mongostore.OutboxEntry[]", "external entries (no target), oldest first, each "
            .. "with `token`, `source_id`, `lease_until`, `claim_size` and `tries` (after a failed try)" } },
          fails = fails("invalid"),
          raises = "a `limit` that is not a number (a number that is not an integer >= 1 fails `invalid`)",
          desc = [[
For an event loop of the application's that delivers external events itself
(the engine needs no `on_external`): claims the pending outbox entries without
a target whose wait after a failed try is over, whole source documents at a
time under the engine's `lease`, as the relays claim. No other relay, loop or
process gets them until the lease runs out (`renew_external` extends it);
after a crash they come back once it has. Hand each entry to the handler and
report with `settle_external`. While a document is claimed here its targeted
entries wait too, so settle (or renew) promptly.]],
          example = [[
local entries = assert(engine:claim_external(16))
for _, entry in ipairs(entries) do
  local ok, err = pcall(charge_card, entry.event.data)
  engine:settle_external(entry, ok, err)
end]] },
        { method = "renew_external", of = "mongostore.Engine",
          params = { { "entries", "mongostore.OutboxEntry[]", "claimed entries whose handlers still run" } },
          returns = {
            { "renewed", "integer", "claims extended to now + `lease` (one update per source document)" },
            { "lost", "mongostore.OutboxEntry[]", "entries whose claim ran out and passed on: another relay may "
              .. "deliver them too" },
          },
          fails = fails("invalid"),
          raises = "`entries` not a list of claimed entries",
          desc = "Call it every `lease / 3` or so while a handler runs; each entry's `lease_until` is updated." },
        { method = "settle_external", of = "mongostore.Engine",
          params = {
            { "entry", "mongostore.OutboxEntry", "an entry `claim_external` gave" },
            { "ok", "boolean?", "true: delivered; false or nil: the try failed" },
            { "err", "any?", "why it failed (logged)" },
            { "opts", "mongostore.SettleOptions?", "" },
          },
          returns = { { "result", "mongostore.SettleResult", "what was done" } },
          fails = fails("invalid"),
          raises = "an `entry` that is not a claimed entry, a wrong `opts`, an unknown option",
          desc = [[
Delivered: acks the entry while the claim is still the caller's. Failed:
counts a try on the entry itself (`tries`), logs `err`, and stamps the entry
with its next try, 0.5 s doubled per failure up to 60 s, each wait drawn
between half and all of that (jitter); after `max_attempts` tries it gives
the entry up (`on_dead_letter`, else logged) and acks it. The backoff is on
the entry, so it holds for every process. The last entry settled of a claim
gives the claim back: what waits on the document is claimable at once, and a
failed entry comes again after its wait.]] },
        { class = "mongostore.SettleOptions",
          desc = "The options of `engine:settle_external`; an unknown key raises.",
          fields = {
            { "release", "boolean?", "end the claim now (true) or keep it (false); default: when this is the "
              .. "last open entry of the claim `claim_external` made on this engine (a loop that settles through "
              .. "other engines, as `mongostore.ngx` does across thread VMs, counts them itself)" },
            { "log", "boolean?", "false: do not log the failure (the caller logs `result.message`)",
              default = "true" },
          } },
        { class = "mongostore.SettleResult",
          desc = "What `engine:settle_external` did.",
          fields = {
            { "outcome", "\"delivered\"|\"retry\"|\"given_up\"", "acked; waiting for its next try; dead "
              .. "lettered and acked" },
            { "tries", "integer?", "(failed) the tries it has had" },
            { "wait", "number?", "(retry) seconds until its next try" },
            { "retry_at", "number?", "(retry) epoch seconds of its next try" },
            { "lost", "true?", "(retry) the claim had passed on: nothing was written" },
            { "message", "string?", "(failed) the log line" },
          } },
        { method = "relay_inbox", of = "mongostore.Engine", params = {},
          returns = { { "n", "integer", "entries handled (delivered, or given up)" } },
          desc = [[
The inbox pass: claims the queued events of up to `batch` executions (the most
urgent first, then the oldest) under a lease of `lease` seconds and a fence,
delivers each execution's events in order through the batched path (one load,
one bulk write per round) with the fence on every commit, deletes the
delivered entries in one delete that only matches while the claim is its own,
and gives the claims back. About nine round trips a pass, whatever the number
of executions. An event for an execution that does not exist yet is retried on
later passes and given up after `max_attempts` (`on_dead_letter`).]] },
        { method = "sweep", of = "mongostore.Engine",
          params = { { "now", "number?", "epoch seconds", default = "the engine's clock" } },
          returns = { { "n", "integer", "timers handled" } },
          desc = [[
Fires each due timer as `{ kind = "Timeout", id = "timeout:<id>:<path>:<fire_at>" }`;
the commit that applies it also disarms it. A Timeout for a state left or
re-armed since changes nothing. The due timers are fired a page at a time
(`sweep_batch` documents): one find loads every execution of the page with
its armed timers, the Timeouts land in bulk writes (several of one execution
in order, each checked against the timers the one before left; each commit
disarms its timer and sets the execution's mark to the earliest timer it
leaves, so the next sweep does not read it again), and one `delete_timers`
removes the timers no commit disarmed (a Timeout held while suspended, one
refused), so a page costs a handful of round trips however many timers it
holds. A timer whose delivery answers
`not_found` or `invalid` is removed too (and logged), so it cannot fire for
ever; one whose delivery failed otherwise stays for the next sweep. Pages
are read until one comes back short.]] },
      },
    },
    {
      title = "The inbox, step by step",
      intro = [[
`local inbox = require "mongostore.inbox"`: the steps `relay_inbox` takes, for
a worker that runs them itself (or a spec that interleaves two workers).]],
      entries = {
        { fn = "claim", module = "mongostore.inbox",
          params = { { "e", "mongostore.Engine", "the worker's engine (its batch, lease, inbox_max_events)" } },
          returns = { { "claim", "mongostore.InboxClaim", "what the pass holds" } },
          fails = fails("network", "timeout", "server"),
          desc = [[
Takes the claims (`<prefix>_inbox_claims`, one per execution: token, until,
fence) of up to `batch` executions whose lease ran out, raising each fence,
and reads their queued events oldest first. A claim held by another worker is
left to it.]] },
        { class = "mongostore.InboxClaim",
          desc = "A pass's claim, from `inbox.claim`.",
          fields = {
            { "token", "string", "the claim's token (what its ack and release match)" },
            { "deadline", "number", "epoch seconds: no event is applied after it (half the lease)" },
            { "fences", "table<string, integer>", "execution id -> the fence its commits carry" },
            { "entries", "table[]", "`{ id, execution_id, priority, at, event }`, oldest first; `inbox.deliver` "
              .. "adds `done` and `result`" },
          } },
        { fn = "deliver", module = "mongostore.inbox",
          params = { { "e", "mongostore.Engine", "" }, { "claim", "mongostore.InboxClaim", "" } },
          returns = { { "claim", "mongostore.InboxClaim", "the same, each entry with `done` and `result`" } },
          desc = "Delivers the claim's events through `deliver_many`, in order per execution, up to the "
            .. "engine's `inbox_group` events of one execution in one commit, each commit carrying the "
            .. "execution's fence; after a `stale` refusal nothing more of that execution is tried." },
        { fn = "ack", module = "mongostore.inbox",
          params = { { "e", "mongostore.Engine", "" }, { "claim", "mongostore.InboxClaim", "" } },
          returns = { { "n", "integer", "entries deleted: none once a later claim stamped them" } },
          fails = fails("network", "timeout", "server"),
          desc = "Deletes the done entries in one delete that matches only entries still carrying the claim's "
            .. "token." },
        { fn = "release", module = "mongostore.inbox",
          params = { { "e", "mongostore.Engine", "" }, { "claim", "mongostore.InboxClaim", "" } },
          returns = { { "ok", "true", "" } },
          fails = fails("network", "timeout", "server"),
          desc = "Gives back the claims still carrying the token (the fences stay), so what is queued on them "
            .. "is claimable at once." },
        { fn = "pass", module = "mongostore.inbox",
          params = { { "e", "mongostore.Engine", "" } },
          returns = { { "n", "integer", "entries handled" } },
          desc = "claim, deliver, ack, release: `engine:relay_inbox()`." },
      },
    },
    {
      title = "Control",
      intro = "Control events reach the children too. Each returns what `send` returns; on an execution "
        .. "that has ended each fails `finished` and writes nothing.",
      entries = {
        { method = "cancel", of = "mongostore.Engine",
          params = { { "id", "string", "the execution" } },
          returns = { { "ok", "true", "" }, { "how", "\"applied\"|\"duplicate\"", "" },
                      { "result", "mongostore.DeliveryResult", "what the control event did" } },
          fails = fails("not_found", "finished", "conflict", "invalid"),
          raises = "an `id` that is not a string",
          desc = "Cooperative when the active configuration has a `Cancel` transition, which is taken; "
            .. "otherwise the execution ends `CANCELLED` at once." },
        { method = "terminate", of = "mongostore.Engine",
          params = { { "id", "string", "the execution" } },
          returns = { { "ok", "true", "" }, { "how", "\"applied\"|\"duplicate\"", "" },
                      { "result", "mongostore.DeliveryResult", "what the control event did" } },
          fails = fails("not_found", "finished", "conflict", "invalid"),
          raises = "an `id` that is not a string",
          desc = "Ends the execution at once, running no hooks." },
        { method = "suspend", of = "mongostore.Engine",
          params = { { "id", "string", "the execution" } },
          returns = { { "ok", "true", "" }, { "how", "\"applied\"|\"duplicate\"", "" },
                      { "result", "mongostore.DeliveryResult", "what the control event did" } },
          fails = fails("not_found", "finished", "conflict", "invalid"),
          raises = "an `id` that is not a string",
          desc = "Events that arrive are held, in order, until `resume`." },
        { method = "resume", of = "mongostore.Engine",
          params = { { "id", "string", "the execution" } },
          returns = { { "ok", "true", "" }, { "how", "\"applied\"|\"duplicate\"", "" },
                      { "result", "mongostore.DeliveryResult", "what the control event did" } },
          fails = fails("not_found", "finished", "conflict", "invalid"),
          raises = "an `id` that is not a string",
          desc = "Releases the held events." },
      },
    },
  },
}

------------------------------------------------------------------------
-- ngx

api.pages[#api.pages + 1] = {
  file = "ngx",
  title = "OpenResty",
  module = "mongostore.ngx",
  summary = "`mongostore.ngx`: configure, the worker, every store and engine call, and the application's own "
    .. "functions (`msngx.run`, documents) run in nginx worker threads.",
  intro = [[
`local msngx = require "mongostore.ngx"`. In request handlers (rewrite,
access, content) every store and engine call runs in an nginx worker thread
with `ngx.run_worker_thread`, so the handler yields and the event loop keeps
serving other requests. The arguments and results of the store and engine
calls cross the thread boundary as JSON text (the core's codec; `msngx.run`'s
cross as BSON, below): boxed int64s and empty arrays survive both ways,
an Execution comes back as a plain table of its fields, and an argument that
JSON cannot carry is refused with `nil, msg, "invalid"` before any thread
runs. A wrong argument type, which raises in a direct call, comes back from the
thread as `nil, msg, "invalid"`, its message without the file and line Lua put
in front of it, so that a handler may pass it on to a client. A call that finds no free thread slot within
`call_timeout`, or whose thread fails, returns `nil, msg, "unavailable"`.
`send`, `send_external`, `send_many`, `enqueue` and `enqueue_external` fill a missing event id
into the caller's own event table before the call crosses, so after a
`timeout` or `unavailable` the same table can be sent again and dedupe
refuses the copy if the first attempt landed. Requests from outside should
use `send_external`, `enqueue_external` and `start_external`. Document operations, and any other
blocking work of the application, run through `msngx.run`.]],
  sections = {
    {
      title = "Setting up",
      entries = {
        { fn = "configure", module = "mongostore.ngx",
          params = { { "cfg", "mongostore.NgxConfig", "where to connect and how to run" } },
          returns = { { "ok", "true", "" } },
          raises = "a missing `uri`, a setting of the wrong type or out of range, or a `run_modules` that is "
            .. "not a list of module names or prefixes",
          desc = [[
Call it in `init_by_lua`: it only records the settings. Connections are made
lazily in the processes and threads that use them, never in nginx's master.]],
          example = [[
require("mongostore.ngx").configure{ uri = "mongodb://127.0.0.1:27017", db = "orders",
                                     charts = "app.charts", thread_pool = "mongostore" }]] },
        { class = "mongostore.NgxConfig",
          desc = "The settings of `msngx.configure`.",
          fields = {
            { "uri", "string", "a MongoDB URI" },
            { "db", "string?", "database name", default = "\"harel\"" },
            { "prefix", "string?", "collection prefix (as `connect`)" },
            { "trace_max", "integer?", "as `connect`" },
            { "wait", "number?", "seconds a thread's first connect keeps retrying (0 to 86400)", default = "0" },
            { "server_selection_timeout", "number?", "seconds any call waits for a server (0.1 to 3600); "
              .. "written into the URI as `serverSelectionTimeoutMS` and `connectTimeoutMS` unless it sets "
              .. "them", default = "2" },
            { "socket_timeout", "number?", "seconds a call waits for the reply of a server that accepted the "
              .. "connection and stopped answering (0.1 to 3600); written into the URI as `socketTimeoutMS` "
              .. "unless it sets it (libmongoc's own default is 5 minutes). A request on a silent server gets "
              .. "its `timeout`/`network` answer within about twice this (a retryable read or write is tried "
              .. "once more) plus `server_selection_timeout`: 20 s by default. Raise it for `msngx.run` "
              .. "functions whose single operations run longer", default = "10" },
            { "thread_pool", "string?", "the nginx `thread_pool` to run calls in", default = "\"mongostore\"" },
            { "charts", "string?", "the name of a module returning the list of charts" },
            { "trace", "boolean?", "the engine writes trace steps", default = "false" },
            { "inbox", "boolean?", "`start_worker`'s passes also deliver the inbox (`engine:relay_inbox`), "
              .. "backing off while it is idle (50 ms doubling up to 1 s); `false` opts out", default = "true" },
            { "inbox_group", "integer?", "the engines' `inbox_group`: queued events of one execution applied in one "
              .. "commit (1 to 256)", default = "32" },
            { "sweep_batch", "integer?", "the engines' `sweep_batch`: documents with due timers the sweep fires "
              .. "together", default = "500" },
            { "max_conflicts", "integer?", "the engines' `max_conflicts`: how often an event is applied again "
              .. "after losing the version check", default = "50" },
            { "max_inflight", "integer?", "calls in flight per process (keep it at or below "
              .. "`lua_worker_thread_vm_pool_size`)", default = "32" },
            { "call_timeout", "number?", "seconds a call waits for a free slot", default = "30" },
            { "run_modules", "string[]?", "the modules `msngx.run` may call: module names, or prefixes ending "
              .. "in `.` (`\"app.\"`: every module below `app`)", default = "none" },
          } },
        { fn = "config", module = "mongostore.ngx", params = {},
          returns = { { "cfg", "table?", "the recorded settings (the URI with its timeouts); nil before "
            .. "`configure`" } } },
        { fn = "start_worker", module = "mongostore.ngx",
          params = { { "opts", "mongostore.NgxWorkerOptions?", "how often to step" } },
          returns = { { "ok", "true", "" } },
          fails = { "unavailable" },
          raises = "a call before `configure`, a lock dict nginx does not declare, an unknown option, an "
            .. "`on_external` that is not a function or an `external_concurrency` that is not an integer from "
            .. "1 to 1024",
          desc = [[
In `init_worker_by_lua`: runs the relays, the inbox and the timer sweep on
`ngx.timer.every` in each worker process: the relays and the inbox on every
nginx worker at once (their claims keep them apart), the sweep on one at a
time (a `lua_shared_dict` lock). Each step runs in a worker thread; where the lua
module cannot start threads from timers it falls back to direct calls. A
premature timer (reload, shutdown) stops it.

External events (an emit with no target, such as the order chart's `Charge`)
are delivered only with `on_external`. Then every nginx worker runs a loop on
a timer: it claims external entries through a thread call
(`engine:claim_external`, the engine's claim and 10 s lease), runs
`on_external(entry)` for each in an `ngx.thread` light thread of that timer,
where cosockets work (`ngx.socket.tcp`, an HTTP client), at most
`external_concurrency` at once, and renews the claims it holds every 10/3 s
while the handlers run. An entry is acked only after `on_external` returns
`true`; `false`/`nil, err` or a raise is a failed try, logged with `ngx.log`
(warn; error once given up), and the entry comes again after a backoff with
jitter (0.5 s doubling to 60 s, `engine:settle_external`), stored on the
entry so that every worker honours it, until `max_attempts` (100) gives it up.
Delivery is at least once: a worker killed while a handler runs leaves the
entry to come again after the lease, so a handler should pass
`entry.event.id` (or the chart's idempotency key) on as the receiver's
idempotency key. A graceful stop (`nginx -s quit`, a reload) lets the running
handlers finish and settle, and gives the claimed entries not started back, so
bound each handler with socket timeouts. Without `on_external` the entries
stay pending (for another worker that has one) and worker 0 says so once in
the error log.]],
          example = [[
init_worker_by_lua_block {
  require("mongostore.ngx").start_worker{
    interval = 0.1, sweep_interval = 1, external_concurrency = 16,
    on_external = function(entry)
      local sock = ngx.socket.tcp()
      sock:settimeout(5000)
      local ok, err = sock:connect("127.0.0.1", 8081)
      if not ok then return nil, err end
      -- ... send entry.event as the gateway wants it, read its answer ...
      sock:close()
      return true
    end,
  }
}]] },
        { class = "mongostore.NgxWorkerOptions",
          desc = "The options of `msngx.start_worker`.",
          fields = {
            { "interval", "number?", "seconds between steps", default = "0.1" },
            { "sweep_interval", "number?", "seconds between timer sweeps", default = "1" },
            { "lock_dict", "string?", "the `lua_shared_dict` for the sweep's lock", default = "\"mongostore_locks\"" },
            { "lock_ttl", "number?", "seconds the lock is held at most", default = "10" },
            { "on_external", "fun(entry: mongostore.OutboxEntry): boolean?, string?", "delivers one external "
              .. "event (`entry.event`) from a light thread of the nginx worker, cosockets allowed; `true` acks "
              .. "it", default = "none: external events stay pending" },
            { "external_concurrency", "integer?", "handlers running at once per nginx worker (1 to 1024)",
              default = "16" },
            { "deliver", "mongostore.WebhookConfig?", "instead of `on_external`: a signed webhook per external "
              .. "event (`webhook.handler(deliver)`, its `concurrency` as `external_concurrency`); a failed POST "
              .. "is retried with backoff (0.5 s doubling to 60 s, jittered) until `max_attempts`, then kept as "
              .. "failed (`mongostore outbox --failed`, `--redeliver`)" },
          } },
        { fn = "stop_worker", module = "mongostore.ngx", params = {}, returns = {},
          desc = "Stops this process's worker at its next tick (it stops by itself on reload and shutdown)." },
      },
    },
    {
      title = "Store calls",
      intro = [[
`msngx.<name>(...)` runs `store:<name>(...)` in a worker thread and returns what
it returns (an Execution as a plain table of its fields), or `nil, msg,
"unavailable"` when no thread could run it.]],
      forwards = "mongostore.Store",  -- one entry per forwarded Store method (the `ngx` list below)
      entries = {
        { fn = "commit", module = "mongostore.ngx",
          params = {
            { "fields", "mongostore.PlainExecution", "the execution's fields as `msngx.load` returned them" },
            { "opts", "mongostore.CommitOptions?", "as `store:commit`" },
          },
          returns = {
            { "ok", "true", "" },
            { "version", "integer", "the execution's new version" },
          },
          fails = fails("conflict", "duplicate", "invalid", "too_large"),
          fails_extra = { { "found", "integer?", "with `conflict`: the version found" } },
          desc = [[
`store:commit` of the execution rebuilt from its fields, at the version it was
loaded at and with the dedupe digests the fields carry, so the commit needs no
extra read.]] },
        { fn = "save", module = "mongostore.ngx",
          params = { { "fields", "mongostore.PlainExecution", "the execution's fields (a new one: version 0)" } },
          returns = {
            { "ok", "true", "" },
            { "version", "integer", "the execution's new version" },
          },
          fails = fails("conflict", "invalid", "too_large"),
          fails_extra = { { "found", "integer?", "with `conflict`: the version found" } },
          desc = "`store:save` of the execution rebuilt from its fields." },
        { fn = "load_many", module = "mongostore.ngx",
          params = {
            { "ids", "string[]", "the executions" },
            { "opts", "{ timers: boolean? }?", "`timers = true`: also answer each execution's armed timers" },
          },
          returns = {
            { "executions", "table<string, mongostore.PlainExecution>", "by id; an id with no execution has no "
              .. "entry" },
            { "armed", "table<string, table<string, number>>?", "with `timers`: by id, each armed timer's "
              .. "fire_at by its state path" },
          },
          fails = fails("invalid"),
          desc = "`store:load_many` in one find, each execution as its fields." },
        { fn = "commit_many", module = "mongostore.ngx",
          params = { { "items", "{ [1]: mongostore.PlainExecution, [2]: mongostore.CommitOptions? }[]",
                       "pairs of an execution's fields (as `msngx.load` or `msngx.load_many` returned them) and "
                       .. "its commit's options" } },
          returns = { { "results", "{ ok: true?, version: integer?, err: string?, code: string?, found: integer? }[]",
                        "one per item, in order: `ok` and the new `version`, or why not" } },
          fails = fails("invalid"),
          desc = "`store:commit_many` of the executions rebuilt from their fields: one bulk write, each item "
            .. "atomic and guarded on its own." },
        { class = "mongostore.PlainExecution", parent = "mongostore.ExecutionFields",
          desc = [[
An Execution as it crosses the thread boundary: a plain table of its fields
(what `msngx.load` returns and `msngx.commit` takes back).]],
          fields = {
            { "version", "integer?", "the version it was loaded at", default = "0" },
            { "dedupe", "string?", "the dedupe digests it was loaded with (`\"<version>:<hex>\"`); pass it back "
              .. "unchanged" },
          } },
      },
    },
    {
      title = "Engine calls",
      intro = [[
`msngx.<name>(...)` runs `engine:<name>(...)` in a worker thread, with the
charts of `cfg.charts`. The calls that commit to the execution they name
(`send`, `send_external` and the control calls) run one at a time per
execution id in each nginx worker: requests racing on a hot execution wait
their turn (up to `call_timeout`, then `unavailable`) instead of spending the
engine's conflict retries on each other, so each event costs one commit and
none is answered `conflict` for want of retries; only other processes'
commits (and this nginx's other workers) still race them. A `send` or
`send_external` that loses to those races through all of the engine's
retries is not answered `conflict` either: while the inbox is on and
`start_worker` runs in this worker, its event goes to the inbox under the
same id (applied in order behind the others, exactly once) and the call
answers `true, "queued", { outcome = "queued" }`.]],
      forwards = "mongostore.Engine",
      entries = {
        { fn = "send_external", module = "mongostore.ngx",
          params = {
            { "id", "string", "the execution" },
            { "event", "mongostore.Event", "the event from outside" },
          },
          returns = {
            { "ok", "true", "" },
            { "how", "\"applied\"|\"duplicate\"|\"queued\"", "`\"duplicate\"` for an event id already "
              .. "handled; `\"queued\"` for one put in the inbox after losing every retry (see above)" },
            { "result", "mongostore.DeliveryResult", "what the event did (`outcome = \"queued\"` when queued)" },
          },
          fails = fails("not_found", "conflict", "invalid", "too_large"),
          desc = [[
The send for events from an HTTP client: a kind the execution's chart does not
take from outside (`chart.is_external`) is refused with `invalid` before
anything is written, so a client cannot send `SetState`, `Reset`, `Terminate`
or a forged `Timeout`.]] },
        { fn = "enqueue_external", module = "mongostore.ngx",
          params = {
            { "id", "string", "the execution" },
            { "event", "mongostore.Event", "the event from outside; a missing `id` is filled into this table" },
            { "opts", "mongostore.EnqueueOptions?", "as `engine:enqueue`" },
          },
          returns = {
            { "ok", "true", "" },
            { "how", "\"queued\"|\"duplicate\"", "queued now, or queued or handled before under the same "
              .. "event id (nothing queued)" },
          },
          fails = fails("not_found", "conflict", "invalid", "too_large"),
          desc = [[
The enqueue for events from an HTTP client: the checks of `send_external`
first (the execution exists, `not_found` if not; its chart takes the kind from
outside, `invalid` if not), from one read and before anything is written, so
a misspelt kind or id is told to the caller now, not logged by an inbox pass
later; then `engine:enqueue`'s one insert.]] },
        { fn = "start_external", module = "mongostore.ngx",
          params = {
            { "chart_id", "string", "the chart" },
            { "opts", "mongostore.StartOptions?", "as `engine:start`" },
          },
          returns = {
            { "id", "string", "the execution's id" },
            { "created", "boolean", "true when this call created it" },
            { "result", "mongostore.DeliveryResult", "what Start did (outcome `duplicate` when it existed)" },
          },
          fails = fails("conflict", "invalid", "too_large"),
          desc = "The start for requests from outside: an `opts.id` that holds another chart's execution is "
            .. "`conflict`; the same id under the same chart answers that execution from one read." },
      },
    },
    {
      title = "Application functions",
      intro = [[
`msngx.run("app.orders", "create", args)` runs a function of the
application's own module in a worker thread's Lua VM, so it may block
(document operations, any C library) while the handler yields. The module
must be listed in `configure`'s `run_modules`. Inside, `ngx_thread.database()`
gives the VM's Database (`local ngx_thread = require "mongostore.ngx_thread"`).]],
      entries = {
        { fn = "run", module = "mongostore.ngx",
          params = {
            { "module", "string", "the module's name, as `require` takes it; in `run_modules`" },
            { "fn", "string", "the name of a function of the module" },
            { "...", "any", "its arguments, BSON across" },
          },
          returns = { { "r", "any", "what `fn` returns, every value (its own `nil, msg, code[, detail]` too)" } },
          fails = { "invalid", "server", "unavailable" },
          raises = "a call before `configure`, a `module` or `fn` that is not a string or not a valid name, or "
            .. "a `module` not in `run_modules`",
          desc = [[
Calls `require(module)[fn](...)` in a worker thread (configure's
`thread_pool`) and returns what it returns. Values cross as BSON in the
document API's form, so a document comes back as the function had it: every
box as itself (an ObjectId, a date, an int32, ...), integers exact (beyond
2^53 as int64 boxes on LuaJIT), arrays stay arrays, null stays null, and a
nil keeps its place. It takes one of the `max_inflight` slots, as every call
does. Fails with `invalid` for an argument BSON cannot carry (a function, a
table with holes), no such module or no such function; `server` for a Lua
error in `fn` or while loading the module (the message without its file and
line; the whole message and its traceback go to nginx's error log) or a
result BSON cannot carry; `unavailable` when no slot came free within
`call_timeout` or the thread failed.]],
          example = [[
-- app/notes.lua (a module returning M), run in the thread VM:
local ngx_thread = require "mongostore.ngx_thread"
local M = {}
function M.create(text)
  local db = assert(ngx_thread.database())
  local r, err, code = assert(db:collection("notes")):insert_one({ text = text })
  if not r then return nil, err, code end
  return r.inserted_id   -- the ObjectId box crosses as itself (BSON)
end

-- the handler, with configure{ ..., run_modules = { "app." } }:
local id, err, code = msngx.run("app.notes", "create", ngx.var.arg_text)]] },
        { fn = "database", module = "mongostore.ngx_thread",
          params = { { "opts", "mongostore.NgxDatabaseOptions?", "which database" } },
          returns = { { "db", "mongostore.Database", "the thread VM's handle on configure's `uri`" } },
          fails = { "invalid", "unavailable", "network", "timeout", "server" },
          raises = "a call outside an `msngx.run` call, an `opts` that is not a table, an unknown option, or "
            .. "an `opts.db` that is not a string",
          desc = [[
Opened on the first call in a thread VM (with configure's `wait`) and kept for
the VM's life: every later `msngx.run` on that VM gets the same handle. Do not
close it.]] },
        { class = "mongostore.NgxDatabaseOptions",
          desc = "The options of `ngx_thread.database`; an unknown key raises.",
          fields = { { "db", "string?", "database name", default = "configure's `db`" } } },
        { fn = "config", module = "mongostore.ngx_thread", params = {},
          returns = { { "cfg", "table", "a copy of `configure`'s settings (the URI with its timeouts)" } },
          raises = "a call outside an `msngx.run` call",
          desc = "For a module that opens handles of its own." },
      },
    },
    {
      title = "Signed webhooks",
      intro = [[
`mongostore.webhook` makes an `on_external` handler that POSTs each external
event to one URL from the nginx event loop (it needs cosockets: a timer, a
light thread or a handler, not a worker thread), over `mongostore.ngx_http`,
a small HTTP/1.1 client (one request per connection, TLS verified against
`lua_ssl_trusted_certificate`, each step bounded by `timeout`, answers read up
to 1 MiB). Each POST carries the event as JSON (`id`, `kind`, `data`,
`source_id`, `created_time`, `seq`), `Idempotency-Key: <event id>`,
`X-Mongostore-Timestamp: <epoch seconds>` and `X-Mongostore-Signature:
sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" under the secret>`. A 2xx is
delivered; anything else is a failure the caller retries. A receiver checks a
request with `webhook.verify` (or the same HMAC in its own language) and keys
its work on the idempotency key, since a retry after a lost answer sends the
same event again.]],
      entries = {
        { fn = "handler", module = "mongostore.webhook",
          params = { { "cfg", "mongostore.WebhookConfig", "where and how to POST" } },
          returns = { { "fn", "fun(entry: mongostore.OutboxEntry): true?, string?, string?", "the on_external: "
                        .. "true, or nil, why and the code (`network`, `timeout`, `server` for a non-2xx answer)" } },
          raises = "a bad `cfg` (no http(s) url, a secret under 16 bytes, an unknown option)",
          example = [[
local send = require("mongostore.webhook").handler{ url = "https://billing.example/hooks", secret = SECRET }
local ok, err = send(entry)   -- in a timer or a light thread]] },
        { class = "mongostore.WebhookConfig",
          desc = "Where a webhook goes; an unknown key raises.",
          fields = {
            { "url", "string", "http:// or https:// (an IP address, or a name nginx's `resolver` resolves)" },
            { "secret", "string", "the HMAC key, at least 16 bytes" },
            { "timeout", "number?", "seconds for each step of a request", default = "10" },
            { "concurrency", "integer?", "requests at once, for a caller that runs several", default = "16" },
            { "verify", "boolean?", "check the server's certificate and name", default = "true" },
            { "headers", "table<string, string>?", "extra request headers" },
          } },
        { fn = "sign", module = "mongostore.webhook",
          params = { { "secret", "string", "the HMAC key" }, { "timestamp", "string|number", "epoch seconds" },
                     { "body", "string", "the request body" } },
          returns = { { "signature", "string", "`sha256=<64 hex>`" } },
          raises = "an empty secret or a body that is not a string" },
        { fn = "verify", module = "mongostore.webhook",
          params = { { "secret", "string", "the HMAC key" }, { "timestamp", "string|number", "the header's value" },
                     { "body", "string", "the request body as received" },
                     { "signature", "string", "the signature header's value" },
                     { "opts", "{ now: number?, tolerance: number? }?", "the clock, and how far the timestamp may "
                       .. "be from it (300 s)" } },
          returns = { { "ok", "boolean", "the body was signed with secret, recently" },
                      { "why", "string?", "when not" } },
          example = [[
-- the receiving side, in nginx
ngx.req.read_body()
local h = ngx.req.get_headers()
local ok = require("mongostore.webhook").verify(SECRET, h["x-mongostore-timestamp"],
  ngx.req.get_body_data(), h["x-mongostore-signature"])
if not ok then return ngx.exit(401) end]] },
        { fn = "body", module = "mongostore.webhook",
          params = { { "entry", "mongostore.OutboxEntry", "an external entry" } },
          returns = { { "json", "string", "the POST's body" } } },
        { fn = "check", module = "mongostore.webhook",
          params = { { "cfg", "mongostore.WebhookConfig", "a config" }, { "fn", "string?", "the caller's name" } },
          returns = { { "cfg", "mongostore.WebhookConfig", "the same table" } },
          raises = "what `handler` raises" },
        { fn = "request", module = "mongostore.ngx_http",
          params = { { "req", "{ url: string, method: string?, headers: table?, body: string?, timeout: number?, "
                       .. "verify: boolean?, server_name: string? }", "the request (POST by default)" } },
          returns = { { "res", "{ status: integer, headers: table<string, string>, body: string }",
                        "the answer; header names lower-case" } },
          fails = { "invalid", "network", "timeout", "server", "too_large" },
          raises = "a `req` that is not a table",
          desc = "One HTTP/1.1 request over a cosocket: Content-Length, chunked and close-delimited answers; "
            .. "a header that would split the request is refused." },
        { fn = "parse_url", module = "mongostore.ngx_http",
          params = { { "url", "string", "http:// or https://" } },
          returns = { { "u", "{ scheme: string, host: string, port: integer, path: string }", "its parts" } },
          desc = "nil and a message saying what is wrong for a url it cannot take." },
      },
    },
    {
      title = "Who may call, and taking client values",
      intro = [[
`mongostore.ngx_access` decides who may call an HTTP API in nginx. Each
request carries `Authorization: Bearer <token>`: a read token for `GET` and
`HEAD`, a write token (which reads too) for anything else. A write also needs
`Content-Type: application/json` (a `POST` always, another method when it
has a body) and, when the browser sends an `Origin`, one of the allowed ones:
what an HTML form or a script on another site can post without asking first
(`text/plain`, forms) is refused, so no page on another site can
`terminate` an execution. The tokens are kept only as HMAC-SHA256 digests under a key made
at `access.new`, and a token sent is compared with every configured one over
its 32-byte digest, so the time taken says nothing of how much of it matched.
Refusals end the request with 401 (no or unknown token, with
`WWW-Authenticate: Bearer`), 403 (a read token writing, a foreign Origin) or
415 (another media type) and a body that says no more than the status; the reason goes
to the error log at `info` with the request id. With no token configured
every request is refused.

The OpenResty example (`examples/openresty/app/api.lua`) shows the rest of
taking client values safely: `ACCESS:check` first on every request, even an
unknown path; bodies read with `json_decode(body, { exact = true })` (no
repeated key, no number that would be stored as another); ids, kinds and
list arguments checked for type, length, UTF-8 and control characters before
any call; only the kinds a chart declares `external` and only the context
fields it declares as `inputs` (`chart.define{ inputs = ... }`, checked by
`engine:start` and so by `msngx.start_external`); event data at most
`engine.MAX_EVENT_DEPTH` levels deep, so that what is accepted can be read
back; every error body `{ error, code?, request_id }` with what went wrong
inside (a Lua error, libmongoc's message naming the server) only in the
error log under that id. Its `nginx.conf` declares the token variables with
`env`, runs the workers as `nobody` when nginx starts as root, and
rate-limits `POST /executions` per client address (429).

A handler that passes a client's values on to models, the record store or
the document API: models and records take plain tables as data (ids cast or
refused, operators in values refused, updates limited to declared fields;
[models](models.md#taking-client-values), [records](records.md)), and the
document API sends filters as written unless given `sanitize = true`
([documents](documents.md#client-values)). [SECURITY.md](../SECURITY.md)
has the threat model and a deployment checklist.]],
      entries = {
        { fn = "new", module = "mongostore.ngx_access",
          params = { { "opts", "{ read_tokens: string[]?, write_tokens: string[]?, allowed_origins: string[]? }",
                       "the tokens, and the origins (`scheme://host[:port]`) that may write from a browser" } },
          returns = { { "access", "mongostore.Access", "" } },
          raises = "an unknown option, an empty token, an origin that is not `scheme://host[:port]`",
          example = [[
local ACCESS = require("mongostore.ngx_access").from_env()
-- content_by_lua
ACCESS:check(ngx.req.get_method() == "GET" and "read" or "write")  -- or the request ends here]] },
        { fn = "from_env", module = "mongostore.ngx_access",
          params = { { "getenv", "fun(name: string): string?", "where to read", default = "os.getenv" } },
          returns = { { "access", "mongostore.Access", "" } },
          desc = "`MONGOSTORE_API_READ_TOKENS`, `MONGOSTORE_API_WRITE_TOKENS` and `MONGOSTORE_API_ORIGINS`, "
            .. "each comma-separated. nginx clears the environment of its workers: declare each with `env` in "
            .. "nginx.conf (or call this in `init_by_lua`, which runs in the master)." },
        { fn = "bearer", module = "mongostore.ngx_access",
          params = { { "header", "string?", "an Authorization header" } },
          returns = { { "token", "string?", "its bearer token" } } },
        { class = "mongostore.Access", desc = "Who may call; from `access.new` or `access.from_env`." },
        { method = "check", of = "mongostore.Access",
          params = { { "kind", "\"read\"|\"write\"", "what the request does" } },
          returns = { { "ok", "true", "the request may go on" } },
          raises = "a `kind` that is neither",
          desc = "In a request handler: true, or the request ends with the refusal (`ngx.exit`)." },
        { method = "decide", of = "mongostore.Access",
          params = { { "req", "{ kind: string, authorization: string?, content_type: string?, origin: string?, "
                       .. "method: string?, has_body: boolean? }", "the request's facts" } },
          returns = { { "ok", "boolean", "" }, { "status", "integer?", "401, 403 or 415 when not" },
                      { "why", "string?", "for the log, never the client" } },
          raises = "a `kind` that is neither `read` nor `write`",
          desc = "What `check` decides, without nginx." },
        { method = "token_kind", of = "mongostore.Access",
          params = { { "token", "string?", "a bearer token" } },
          returns = { { "kind", "\"read\"|\"write\"|nil", "what it allows" } } },
        { field = "BODIES", module = "mongostore.ngx_access", type = "table<integer, string>",
          desc = "The refusals' bodies by status: `{\"error\":\"unauthorized\"}`, `forbidden`, "
            .. "`unsupported media type`." },
      },
    },
  },
}

-- The Store and Engine calls mongostore.ngx forwards to a worker thread (its
-- own entries above cover commit, save, load_many, commit_many, send_external,
-- enqueue_external and start_external);
-- the Store's must be mongostore.store's CALLS less the "local" ones, which
-- the spec checks. A forwarded call returns an Execution as ngx_execution.
api.ngx_forwards = {
  ["mongostore.Store"] = { "load", "load_for_event", "is_processed", "list_executions", "read_trace",
                           "append_trace", "pending_outbox", "pending_spawns", "due_timers", "ack_outbox",
                           "ack_spawn", "release_outbox", "release_spawn", "delete_timer", "delete_timers", "info",
                           "stats",
                           "ack_outbox_many", "fail_outbox", "failed_outbox", "redeliver_failed", "renew_outbox",
                           "retry_outbox" },
  ["mongostore.Engine"] = { "start", "send", "send_many", "enqueue", "cancel", "terminate", "suspend", "resume" },
}

api.ngx_execution = "mongostore.PlainExecution"

return api
