-- wrk script for bench/load_investigation_page.py: count non-2xx answers per thread,
-- stop each thread after WRK_MAX_REQUESTS answers (a bounded run whatever -d says), and
-- print one JSON line with throughput, percentiles and every kind of error.
--
--   wrk -t4 -c50 -d15s --latency -s bench/wrk/report.lua -H "Cookie: ..." URL -- 20000

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  non2xx = 0
  answered = 0
  limit = tonumber(args[1] or "0") or 0
end

function response(status, headers, body)
  answered = answered + 1
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
  end
  if limit > 0 and answered >= limit then
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local bad = 0
  for _, thread in ipairs(threads) do
    bad = bad + thread:get("non2xx")
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, "mean_us": %.1f, "p50_us": %d, ' ..
    '"p95_us": %d, "p99_us": %d, "max_us": %d, "non2xx": %d, "connect_errors": %d, ' ..
    '"read_errors": %d, "write_errors": %d, "status_errors": %d, "timeouts": %d}\n',
    summary.requests, summary.duration, summary.bytes, latency.mean,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max,
    bad, e.connect, e.read, e.write, e.status, e.timeout))
end
