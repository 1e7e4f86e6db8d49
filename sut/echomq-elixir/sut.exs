# A worker program of echomq-chaos's own that runs the real EchoMQ (echo_mq 2.6.x, compiled
# elsewhere: docs/echomq.md, "The shipped consumer") as its users run it, speaking the contract
# of docs/sut.md:
#
#   elixir -pa <build>/echo_data/ebin -pa <build>/echo_wire/ebin -pa <build>/echo_mq/ebin sut.exs
#       worker   [--metronome 1] [--beat-ms N]
#                                        CHAOS_CONCURRENCY EchoMQ.Consumer loops (with
#                                        --metronome 1: a pool under one EchoMQ.Metronome;
#                                        --beat-ms N: their beat N ms, not the interval)
#       producer [--groups N [--limit M]] one payload a line on stdin, each admitted into a
#                                        group's lane with EchoMQ.Lanes.enqueue; prints
#                                        `<ms> enqueue id=<id> group=<group>`
#
# The worker runs EchoMQ's SHIPPED loop, untouched: each consumer reaps (Jobs.reap), promotes,
# drains the ring with Lanes.claim, handling one job at a time, then parks on the wake key for
# at most beat_ms (= CHAOS_REAP_INTERVAL_MS). It renews no lease (EchoMQ.Consumer has no
# heartbeat), so CHAOS_HEARTBEAT_MS is not read. Its handler sleeps the payload's handler_ms and
# answers :ok; the loop itself completes the job. To log what that complete answered, each
# consumer's connection is a tap (Tap, below) that forwards every call to its EchoMQ.Connector
# unchanged and logs the reply of the complete its handler announced. Each line printed is
# `<unix ms> <event> key=value ...`: `claim id= token= group= handler_ms=` when the handler
# starts, `complete id= token= result=ok|gone` for the loop's complete. The consumers (and the
# Metronome) run under a supervisor shaped as EchoMQ.Queue's (rest_for_one, each member a
# permanent child), as a deployment runs them: a member that crashes is restarted.
#
# Every connection logs in as `default` with the URL's password and is named after the process
# (`<CHAOS_NAME>-c<i>`, `<CHAOS_NAME>-m`), as the recorder attributes calls by client name.
# Group lanes are named by branded ids (EchoMQ refuses any other): the producer mints N of them
# (namespace GRP) at its start. Bad usage: a line on stderr and exit 2.
alias EchoMQ.{Connector, Lanes, Metronome}

defmodule Sut do
  def log(event, fields \\ []) do
    pairs = Enum.map_join(fields, "", fn {k, v} -> " #{k}=#{v}" end)
    IO.puts("#{System.system_time(:millisecond)} #{event}#{pairs}")
  end

  def fail(message) do
    IO.puts(:stderr, "echomq-elixir: #{message}")
    System.halt(2)
  end

  def env(name, default \\ nil) do
    case System.get_env(name) do
      value when value in [nil, ""] ->
        if default == nil, do: fail("#{name} is not set (see docs/sut.md)"), else: default

      value ->
        value
    end
  end

  def int_env(name, default) do
    raw = env(name, Integer.to_string(default))

    case Integer.parse(raw) do
      {n, ""} when n >= 0 -> n
      _ -> fail("#{name} = #{inspect(raw)}: expected an integer >= 0")
    end
  end

  # argv after the mode: --name value pairs, each an integer >= 0 among the mode's own
  def options(args, known) do
    parse(args, known, Map.new(known))
  end

  defp parse([], _known, acc), do: acc
  defp parse([name], _known, _acc), do: fail("#{name}: needs a value")

  defp parse([name, value | rest], known, acc) do
    unless Keyword.has_key?(known, String.to_atom(String.trim_leading(name, "--"))),
      do: fail("#{name}: not an option here (#{Enum.map_join(known, ", ", fn {k, _} -> "--#{k}" end)})")

    case Integer.parse(value) do
      {n, ""} when n >= 0 -> parse(rest, known, Map.put(acc, String.to_atom(String.trim_leading(name, "--")), n))
      _ -> fail("#{name} #{inspect(value)}: expected an integer >= 0")
    end
  end

  # CHAOS_VALKEY_URL: redis://user:password@host:port; EchoMQ's connector logs in as default
  def connector(name) do
    uri = URI.parse(env("CHAOS_VALKEY_URL"))
    password =
      case String.split(uri.userinfo || "", ":", parts: 2) do
        [_user, pass] -> URI.decode(pass)
        _ -> nil
      end

    [host: String.to_charlist(uri.host || "127.0.0.1"), port: uri.port || 6379,
     password: password, client_name: name, heartbeat_ms: 30_000]
  end

  def handler_ms(payload) do
    case Regex.run(~r/"handler_ms"\s*:\s*(\d+)/, payload) do
      [_, ms] -> String.to_integer(ms)
      _ -> 0
    end
  end

  def crash?(payload), do: Regex.match?(~r/"crash"\s*:\s*true/, payload)
end

defmodule Member do
  # One consumer of the pool as a supervised child: its own connector, a tap on it (below), and
  # the shipped EchoMQ.Consumer loop over the tap, its handler logging each claim.
  alias EchoMQ.{Connector, Consumer}

  def child_spec({index, config}) do
    %{id: {:consumer, index}, start: {__MODULE__, :start_link, [index, config]},
      restart: :permanent, shutdown: 15_000}
  end

  def start_link(index, c) do
    {:ok, conn} = Connector.start_link(Sut.connector("#{c.name}-c#{index}"))
    {:ok, tap} = Tap.start_link(conn)

    handler = fn %{id: id, payload: payload, attempts: att, group: group} ->
      ms = Sut.handler_ms(payload)
      Sut.log("claim", id: id, token: att, group: group, handler_ms: ms)
      if Sut.crash?(payload), do: (Sut.log("crash", id: id); :erlang.halt(137))
      Process.sleep(ms)
      Tap.expect(tap, id, att)
      :ok
    end

    Consumer.start_link([queue: c.queue, handler: handler, conn: tap, lease_ms: c.lease_ms,
                         beat_ms: c.beat_ms] ++ if(c.metronome, do: [metronome: c.metronome], else: []))
  end
end

defmodule Tap do
  # A connection of the consumer's that forwards every call to its EchoMQ.Connector unchanged
  # (the loop never knows) and, for the complete its handler announced (`expect/3`), logs the
  # reply: 1 accepted, 0 refused (EchoMQ's {:error, :gone}). A NOSCRIPT reply is passed on and
  # the expectation kept, as the connector then loads the script and sends it again.
  use GenServer

  def start_link(conn), do: GenServer.start_link(__MODULE__, conn)
  def expect(tap, id, token), do: GenServer.cast(tap, {:expect, id, token})

  @impl true
  def init(conn), do: {:ok, %{conn: conn, expect: nil}}

  @impl true
  def handle_cast({:expect, id, token}, s), do: {:noreply, %{s | expect: {id, token}}}

  @impl true
  def handle_call(message, _from, s) do
    reply = GenServer.call(s.conn, message, :infinity)
    {:reply, reply, observe(message, reply, s)}
  end

  defp observe({:pipeline, [["EVALSHA", _sha, _n | args]]}, {:ok, [result]}, %{expect: {id, token}} = s)
       when result in [0, 1] do
    if id in args and Integer.to_string(token) in args do
      Sut.log("complete", id: id, token: token, result: if(result == 1, do: "ok", else: "gone"))
      %{s | expect: nil}
    else
      s
    end
  end

  defp observe(_message, _reply, s), do: s
end

defmodule SigTerm do
  # SIGTERM (docs/sut.md: finish what you hold, claim nothing more) as a message to the main
  # process, instead of the VM's default stop
  @behaviour :gen_event
  def init({main, _old_handler_gone}), do: {:ok, main}
  def handle_event(:sigterm, main), do: (send(main, :sigterm); {:ok, main})
  def handle_event(_signal, main), do: {:ok, main}
  def handle_call(_request, main), do: {:ok, :ok, main}
  def handle_info(_info, main), do: {:ok, main}
  def terminate(_reason, _main), do: :ok
  def code_change(_old, main, _extra), do: {:ok, main}

  def install do
    :ok = :gen_event.swap_sup_handler(:erl_signal_server, {:erl_signal_handler, []}, {SigTerm, self()})
  end
end

# EchoData's boot line (its codec self-check) stays out of the log lines the runner reads
Logger.configure(level: :warning)
{:ok, _} = Application.ensure_all_started(:echo_mq)
name = Sut.env("CHAOS_NAME")
queue = Sut.env("CHAOS_QUEUE", "jobs")
node_bits = rem(:erlang.phash2(name), 1024)

case System.argv() do
  ["worker" | args] ->
    opts = Sut.options(args, metronome: 0, "beat-ms": 0)
    lease_ms = Sut.int_env("CHAOS_LEASE_MS", 30_000)
    # --beat-ms N: the consumers' beat set apart from the interval the deployment promises (a
    # misconfigured pool: scenarios/echomq/broken/elixir-long-beat.toml)
    beat_ms =
      if opts[:"beat-ms"] > 0, do: opts[:"beat-ms"],
        else: max(Sut.int_env("CHAOS_REAP_INTERVAL_MS", 1_000), 1)
    concurrency = max(Sut.int_env("CHAOS_CONCURRENCY", 1), 1)
    SigTerm.install()

    # Supervised as EchoMQ.Queue supervises a pool (rest_for_one: the metronome first, by name,
    # then the consumers; a crash restarts that member, a metronome's restarts the consumers
    # after it), with our own taps on the consumers' connections (Member, above).
    config = %{name: name, queue: queue, lease_ms: lease_ms, beat_ms: beat_ms,
               metronome: if(opts.metronome == 1, do: :sut_metronome)}
    metronome =
      if config.metronome do
        [Supervisor.child_spec({Metronome, queue: queue, beat_ms: beat_ms, name: config.metronome,
                                connector: Sut.connector("#{name}-m")}, id: :metronome)]
      else
        []
      end
    members = for index <- 1..concurrency, do: Member.child_spec({index, config})
    {:ok, pool} = Supervisor.start_link(metronome ++ members, strategy: :rest_for_one,
                                        max_restarts: 20, max_seconds: 5)

    Sut.log("worker_ready", name: name, concurrency: concurrency, lease_ms: lease_ms, beat_ms: beat_ms,
            metronome: opts.metronome)

    receive do
      :sigterm ->
        Sut.log("sigterm", msg: "finishing held jobs, claiming no more")
        # each consumer honours the shutdown at its next settle point (the job in hand finishes)
        Supervisor.stop(pool, :shutdown, 20_000)
        Sut.log("stopped")
        System.halt(0)
    end

  ["producer" | args] ->
    opts = Sut.options(args, groups: 0, limit: 0)
    if opts.groups < 1, do: Sut.fail("--groups N: EchoMQ.Consumer claims only from group lanes")
    {:ok, conn} = Connector.start_link(Sut.connector(name))
    groups = List.to_tuple(for _ <- 1..opts.groups, do: EchoData.BrandedId.encode!("GRP", EchoData.Snowflake.next(node_bits)))

    if opts.limit > 0 do
      for group <- Tuple.to_list(groups), do: :ok = Lanes.limit(conn, queue, group, opts.limit)
    end

    Sut.log("producer_ready", name: name, groups: Enum.join(Tuple.to_list(groups), ","))

    Stream.repeatedly(fn -> IO.read(:stdio, :line) end)
    |> Stream.take_while(&is_binary/1)
    |> Stream.with_index()
    |> Enum.each(fn {line, count} ->
      payload = String.trim_trailing(line, "\n")
      id = EchoData.BrandedId.encode!("JOB", EchoData.Snowflake.next(node_bits))
      group = elem(groups, rem(count, opts.groups))

      case Lanes.enqueue(conn, queue, group, id, payload) do
        {:ok, :enqueued} -> Sut.log("enqueue", id: id, group: group)
        {:ok, :duplicate} -> Sut.log("duplicate", id: id, group: group)
        other -> Sut.log("enqueue_failed", id: id, error: inspect(other))
      end
    end)

  _ ->
    Sut.fail("usage: sut.exs worker [--metronome 1] [--beat-ms N] | producer --groups N [--limit M]")
end
