# PGXS build of lonnymq. The version comes from lonnymq.control only.
EXTENSION   = lonnymq
EXTVERSION  = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)

# Every script is committed at the top level and installed as it is:
#   lonnymq--X.sql       install scripts; released ones are frozen (test/released.sha256)
#   lonnymq--A--B.sql    upgrade scripts
# The script of the version in development, and the upgrade script into it,
# are generated from sql/ by `make scripts`; `make check-scripts` (run before
# installcheck, and by scripts/test) fails when a committed script is stale.
DATA        = $(wildcard $(EXTENSION)--*.sql)
EXTRA_CLEAN = $(EXTENSION)-*.zip

# sql/*.sql, one purpose per file in name order, make the install script.
# The upgrade script from the previous version is its hand-written part
# (sql/upgrade/PREV--THIS.sql: table changes, dropped functions) followed by
# every source file that only defines functions, views and privileges: they are
# written CREATE OR REPLACE so that replaying them updates an installed version.
SOURCES     = $(sort $(wildcard sql/*.sql))
UPGRADE_IN  = $(wildcard sql/upgrade/*--$(EXTVERSION).sql)
REPLAYABLE  = $(filter-out sql/00_header.sql sql/10_tables.sql, $(SOURCES))
CURRENT_SCRIPT = $(EXTENSION)--$(EXTVERSION).sql
UPGRADE_SCRIPT = $(patsubst sql/upgrade/%,$(EXTENSION)--%,$(UPGRADE_IN))

# Every test/sql/*.sql is a pg_regress test and every test/specs/*.spec an
# isolation test; no hand-kept lists.
REGRESS       = $(sort $(patsubst test/sql/%.sql,%,$(wildcard test/sql/*.sql)))
REGRESS_OPTS  = --inputdir=test
ISOLATION     = $(sort $(patsubst test/specs/%.spec,%,$(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Regenerates the development version's scripts from sql/.
scripts:
	cat $(SOURCES) > $(CURRENT_SCRIPT)
ifneq ($(UPGRADE_IN),)
	cat $(UPGRADE_IN) $(REPLAYABLE) > $(UPGRADE_SCRIPT)
endif

# Fails when a committed script does not match its sources, or a released one changed.
check-scripts:
	@cat $(SOURCES) | cmp -s - $(CURRENT_SCRIPT) \
		|| { echo "$(CURRENT_SCRIPT) does not match sql/: run 'make scripts' and commit it"; exit 1; }
ifneq ($(UPGRADE_IN),)
	@cat $(UPGRADE_IN) $(REPLAYABLE) | cmp -s - $(UPGRADE_SCRIPT) \
		|| { echo "$(UPGRADE_SCRIPT) does not match sql/: run 'make scripts' and commit it"; exit 1; }
endif
	@sha256sum --quiet -c test/released.sha256 \
		|| { echo "a released script changed: ship the change as an upgrade script instead"; exit 1; }

installcheck: check-scripts

# A PGXN release zip of the committed tree (pgxn install ./lonnymq-X.zip).
DISTVERSION = $(shell sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' META.json | head -n 1)
dist:
	git archive --format zip --prefix=$(EXTENSION)-$(DISTVERSION)/ -o $(EXTENSION)-$(DISTVERSION).zip HEAD

.PHONY: dist scripts check-scripts
