# Shared by lifecycle_pair.sh, consume_pair.sh and create_pair.sh (sourced; psql=(...) set by the caller).

# The mean time in ms of each named call, top-level statements only (pg_stat_statements),
# comma-separated with a leading comma: ",0.071,0.329".
#   stat_means DATABASE CALL...
stat_means() {
    local db=$1 call means=
    shift
    for call in "$@"; do
        means+=,$("${psql[@]}" -d "$db" -c "SELECT round(mean_exec_time::numeric, 3) FROM pg_stat_statements
            WHERE query LIKE '%$call(%' AND toplevel ORDER BY calls DESC LIMIT 1")
    done
    echo "$means"
}

# Fresh databases lp_a (lonnymq as installed) and lp_b (the same with DEFINITIONS applied
# over it), each with pg_stat_statements.
#   pair_databases DEFINITIONS
pair_databases() {
    local db
    for db in lp_a lp_b; do
        "${psql[@]}" -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" \
            -c "CREATE DATABASE $db"
        "${psql[@]}" -d "$db" -c "CREATE EXTENSION pg_stat_statements" -c "CREATE EXTENSION lonnymq"
    done
    "${psql[@]}" -d lp_b -f "$1"
}

# PAIR_CHANNELS (1-1000, default 100: how many channels the messages are spread over) into
# $channels, or exit 2.
pair_channels() {
    channels=${PAIR_CHANNELS:-100}
    [[ $channels =~ ^[0-9]+$ ]] && [ "$channels" -ge 1 ] && [ "$channels" -le 1000 ] \
        || { echo "PAIR_CHANNELS must be 1-1000" >&2; exit 2; }
}
