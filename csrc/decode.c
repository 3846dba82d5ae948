/*
 * decode.c - BSON documents into Lua tables for the document API
 * (ms_push_document, ms_push_document_value): being moved here out of value.c.
 */
#include "ms.h"
