/*
 * bulk.c - the Collection's many-document writes (insert_many, bulk_write):
 * being moved here out of collection.c.
 */
#include "document.h"
