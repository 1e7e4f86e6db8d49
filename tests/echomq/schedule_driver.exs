# Drives the real EchoMQ (echo_mq, its public API only) through its schedule moves on a queue,
# for tests/test_schedule_echomq_build.py: one line per step, `<step> <result>`, each result as
# EchoMQ's function gave it, in JSON (atoms as strings, tuples as arrays). Needs the compiled echo_data, echo_wire and echo_mq
# (-pa each ebin) and:
#   CHAOS_HOST, CHAOS_PORT, CHAOS_PASSWORD  the server; every call is on one connection named
#                                           worker-1 (EchoMQ logs in as default)
#   CHAOS_QUEUE                             the queue (its keys: emq:{<queue>}:...)
#   CHAOS_STEPS                             moves | fence | stalled
alias EchoMQ.{Connector, Jobs, Stalled}

{:ok, _} = Application.ensure_all_started(:echo_mq)
queue = System.fetch_env!("CHAOS_QUEUE")

{:ok, conn} =
  Connector.start_link(host: ~c"127.0.0.1", port: String.to_integer(System.fetch_env!("CHAOS_PORT")),
    password: System.fetch_env!("CHAOS_PASSWORD"), client_name: "worker-1", heartbeat_ms: 30_000)

defmodule Term do
  # an Elixir term as JSON text: enough for what EchoMQ's functions answer
  def json(term) when is_boolean(term) or is_nil(term), do: to_string(term || "null")
  def json(term) when is_atom(term) or is_binary(term), do: inspect(to_string(term))
  def json(term) when is_integer(term), do: Integer.to_string(term)
  def json(term) when is_tuple(term), do: json(Tuple.to_list(term))
  def json(term) when is_list(term), do: "[" <> Enum.map_join(term, ",", &json/1) <> "]"
  def json(term) when is_map(term),
    do: "{" <> Enum.map_join(term, ",", fn {k, v} -> json(k) <> ":" <> json(v) end) <> "}"
end

step = fn name, result -> IO.puts("#{name} #{Term.json(result)}") end
# branded ids on a node of this process's own (EchoData.Snowflake), JOB-namespaced
mint = fn -> EchoData.BrandedId.encode!("JOB", EchoData.Snowflake.next(rem(String.to_integer(System.pid()), 1024))) end
claim = fn lease_ms ->
  {:ok, {id, _payload, att}} = Jobs.claim(conn, queue, lease_ms)
  step.("claim", {id, att})
  {id, att}
end

case System.fetch_env!("CHAOS_STEPS") do
  "moves" ->
    # every move once: retry (scheduled), delay, retry at the last attempt (dead), a stale retry,
    # a scheduled admission, promote, then each job completed
    ids = for _ <- 1..4, do: mint.()
    for id <- ids, do: step.("enqueue", {id, Jobs.enqueue(conn, queue, id, "{}")})
    later = mint.()
    step.("enqueue_in", {later, Jobs.enqueue_in(conn, queue, later, "{}", 80)})
    {retried, 1} = claim.(1000)
    step.("retry", Jobs.retry(conn, queue, retried, 1, 100, 3, "boom"))
    {delayed, 1} = claim.(1000)
    step.("delay", Jobs.delay(conn, queue, delayed, 1, 100))
    {failed, 1} = claim.(1000)
    step.("retry_last", Jobs.retry(conn, queue, failed, 1, 100, 1, "boom"))
    {done, 1} = claim.(1000)
    step.("retry_stale", Jobs.retry(conn, queue, done, 7, 100, 3, "boom"))
    step.("complete", Jobs.complete(conn, queue, done, 1))
    step.("promote_early", Jobs.promote(conn, queue, 100))
    Process.sleep(150)
    step.("promote", Jobs.promote(conn, queue, 100))
    for _ <- 1..3 do
      {id, att} = claim.(1000)
      step.("complete", Jobs.complete(conn, queue, id, att))
    end

  "fence" ->
    # the old holder's retry after a reap (accepted: the token still matches) and after the
    # re-claim (refused: stale)
    id = mint.()
    step.("enqueue", {id, Jobs.enqueue(conn, queue, id, "{}")})
    {^id, 1} = claim.(50)
    Process.sleep(80)
    step.("reap", Jobs.reap(conn, queue))
    step.("retry", Jobs.retry(conn, queue, id, 1, 50, 3, "late"))
    Process.sleep(60)
    step.("promote", Jobs.promote(conn, queue, 100))
    {^id, 2} = claim.(1000)
    step.("retry_stale", Jobs.retry(conn, queue, id, 1, 50, 3, "late"))
    step.("complete", Jobs.complete(conn, queue, id, 2))

  "stalled" ->
    # EchoMQ.Stalled's sweep with max_stalled 2: recovered once, dead-lettered at the second
    id = mint.()
    step.("enqueue", {id, Jobs.enqueue(conn, queue, id, "{}")})
    for attempt <- 1..2 do
      {^id, ^attempt} = claim.(30)
      Process.sleep(60)
      step.("sweep", Stalled.check(conn, queue, max_stalled: 2, limit: 100))
    end
end

IO.puts("done")
