# syntax=docker/dockerfile:1
# Two images from one build (charts/toposched, deploy/):
#   docker build -t toposched:dev .                                   the agent's (and every command)
#   docker build --target extender -t toposched-extender:dev .        the extender's: no hwloc
# The default image holds /usr/local/bin/toposched (all subcommands) and toposched-extender; the
# extender image holds toposched-extender alone (`toposched serve` linked without hwloc) and
# none of hwloc's libraries (docs/architecture.md, "Binaries").
#
# Stage 1 builds with exactly the Debian packages the README installs: it runs
# scripts/install-deps.sh (the one package list) and scripts/build.sh, tests and benchmarks off.
FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN ./scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN BUILD_DIR=/build BUILD_TYPE=Release ./scripts/build.sh \
      -DTOPOSCHED_BUILD_TESTS=OFF -DTOPOSCHED_BUILD_BENCH=OFF -DTOPOSCHED_SANITIZE=OFF \
 && install -D -m 0755 /build/src/cmd/toposched /out/usr/local/bin/toposched \
 && install -D -m 0755 /build/src/cmd/toposched-extender /out/usr/local/bin/toposched-extender \
 && strip --strip-debug /out/usr/local/bin/toposched /out/usr/local/bin/toposched-extender \
 && /out/usr/local/bin/toposched --help >/dev/null \
 && /out/usr/local/bin/toposched-extender version >/dev/null \
 && ! ldd /out/usr/local/bin/toposched-extender | grep -q libhwloc

# The extender's image: toposched-extender and the libraries it links, no hwloc.
FROM debian:bookworm-slim AS extender
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      ca-certificates libsimdjson14 libspdlog1.10 libfmt9 libyaml-cpp0.7 libcpprest2.10 libre2-9 \
      libssl3 libstdc++6 libbrotli1 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 toposched \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin toposched
COPY --from=build /out/usr/local/bin/toposched-extender /usr/local/bin/toposched-extender
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/toposched-extender"]
CMD ["--help"]

# The default image (last stage): the shared libraries the binaries link (`ldd toposched`, mapped to bookworm packages)
# and nothing else: no compiler, no shell tools beyond the base image's. NVML is not here on
# purpose: it comes from the host driver at run time (agent --nvml-library; docs/operations.md).
FROM debian:bookworm-slim
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      ca-certificates libhwloc15 libsimdjson14 libspdlog1.10 libfmt9 libyaml-cpp0.7 libcpprest2.10 libre2-9 \
      libssl3 libstdc++6 libudev1 libbrotli1 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 toposched \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin toposched
COPY --from=build /out/usr/local/bin/toposched /out/usr/local/bin/toposched-extender /usr/local/bin/
# Numeric, so that Kubernetes' runAsNonRoot can verify it without a passwd lookup.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/toposched"]
CMD ["--help"]
