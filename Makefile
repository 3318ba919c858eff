# PGXS build of lonnymq. The version comes from lonnymq.control only.
EXTENSION   = lonnymq
EXTVERSION  = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)

# The install script is generated from sql/*.sql (one purpose per file, in
# name order). Upgrade scripts (lonnymq--A--B.sql) are kept as written.
DATA_built  = $(EXTENSION)--$(EXTVERSION).sql
DATA        = $(filter-out $(DATA_built), $(wildcard $(EXTENSION)--*--*.sql))
EXTRA_CLEAN = $(EXTENSION)-*.zip

# Every test/sql/*.sql is a pg_regress test and every test/specs/*.spec an
# isolation test; no hand-kept lists.
REGRESS       = $(sort $(patsubst test/sql/%.sql,%,$(wildcard test/sql/*.sql)))
REGRESS_OPTS  = --inputdir=test
ISOLATION     = $(sort $(patsubst test/specs/%.spec,%,$(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

$(EXTENSION)--$(EXTVERSION).sql: $(sort $(wildcard sql/*.sql))
	cat $^ > $@

# A PGXN release zip of the committed tree (pgxn install ./lonnymq-X.zip).
DISTVERSION = $(shell sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' META.json | head -n 1)
dist:
	git archive --format zip --prefix=$(EXTENSION)-$(DISTVERSION)/ -o $(EXTENSION)-$(DISTVERSION).zip HEAD

.PHONY: dist
