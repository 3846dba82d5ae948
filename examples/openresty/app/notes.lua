-- examples/openresty/app/notes.lua - the example's documents: functions that
-- run in nginx worker threads' VMs, called from app/api.lua through
-- msngx.run("app.notes", fn, ...), so a handler yields while MongoDB answers.
-- Each VM opens its Database once (mongostore.ngx_thread.database) and keeps
-- it; arguments and answers cross the boundary as BSON in the document API's
-- form (an ObjectId or a date comes back as its box).
local ms = require "mongostore"
local msthread = require "mongostore.ngx_thread"

local M = {}

local function notes()
  local db, err, code = msthread.database()
  if not db then return nil, err, code end
  return db:collection("notes")
end

-- create{ text, tags } -> id. The id is a UUID string made here: an
-- ObjectId would be a box, which the answer could not carry as it is.
function M.create(note)
  local c, err, code = notes()
  if not c then return nil, err, code end
  local id = ms.uuid()
  local ok, ierr, icode = c:insert_one({ _id = id, text = note.text, tags = note.tags or ms.array{} })
  if not ok then return nil, ierr, icode end
  return id
end

-- get(id) -> { id, text, tags }, or nil when there is no such note.
function M.get(id)
  local c, err, code = notes()
  if not c then return nil, err, code end
  local doc, ferr, fcode = c:find_one({ _id = id })
  if doc == nil then return nil, ferr, fcode end
  return { id = doc._id, text = doc.text, tags = doc.tags }
end

return M
