# Shared by lifecycle_pair.sh and consume_pair.sh (sourced; psql=(...) set by the caller).

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
