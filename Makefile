# PGXS build of lonnymq. The version comes from lonnymq.control only.
EXTENSION   = lonnymq
EXTVERSION  = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)

# Released scripts are frozen (test/released.sha256) and installed as they are:
# lonnymq--1.0.sql, and every later install and upgrade script in sql/released/.
RELEASED    = $(EXTENSION)--1.0.sql $(sort $(wildcard sql/released/$(EXTENSION)--*.sql))
DATA        = $(RELEASED)

# The version in development is built from sql/ and never committed. Its
# install script is sql/*.sql, one purpose per file, in name order. Its
# upgrade script is the hand-written part (sql/upgrade/PREV--THIS.sql: table
# changes, dropped functions) followed by every source file that only defines
# functions, views and privileges: they are written CREATE OR REPLACE, so
# replaying them updates an installed version.
SOURCES     = $(sort $(wildcard sql/*.sql))
UPGRADE_IN  = $(wildcard sql/upgrade/*--$(EXTVERSION).sql)
REPLAYABLE  = $(filter-out sql/00_header.sql sql/10_tables.sql, $(SOURCES))
CURRENT_SCRIPT = $(EXTENSION)--$(EXTVERSION).sql
UPGRADE_SCRIPT = $(patsubst sql/upgrade/%,$(EXTENSION)--%,$(UPGRADE_IN))
# Once the version is released its frozen script is installed instead (PGXS
# refuses to install two files of one name); scripts/check-version keeps sql/
# equal to it until the next version is opened.
ifeq ($(wildcard sql/released/$(CURRENT_SCRIPT)),)
DATA_built  = $(CURRENT_SCRIPT) $(UPGRADE_SCRIPT)
endif
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

$(CURRENT_SCRIPT): $(SOURCES)
	cat $^ > $@

ifneq ($(UPGRADE_IN),)
$(UPGRADE_SCRIPT): $(UPGRADE_IN) $(REPLAYABLE)
	cat $^ > $@
endif

# Fails when a released script changed, or one in sql/released/ has no checksum.
check-scripts:
	@sha256sum --quiet -c test/released.sha256 \
		|| { echo "a released script changed: ship the change as an upgrade script instead"; exit 1; }
	@for f in $(RELEASED); do grep -q " $$f\$$" test/released.sha256 \
		|| { echo "$$f has no checksum in test/released.sha256"; exit 1; }; done

installcheck: check-scripts

# The scripts make install copies, for servers without PGXS (scripts/test-matrix).
print-data:
	@echo $(DATA) $(DATA_built)

# A PGXN release zip: the committed tree plus the built scripts
# (pgxn install ./lonnymq-X.Y.Z.zip).
DISTVERSION = $(shell sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' META.json | head -n 1)
dist: $(DATA_built)
	git archive --format zip --prefix=$(EXTENSION)-$(DISTVERSION)/ \
		$(addprefix --add-file=,$(DATA_built)) -o $(EXTENSION)-$(DISTVERSION).zip HEAD

.PHONY: dist check-scripts print-data
