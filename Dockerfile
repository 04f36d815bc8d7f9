# Build: docker build -t mcp-connect .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin mcp-connect

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/mcp-connect --create-home mcp-connect
COPY --from=build /src/target/release/mcp-connect /usr/local/bin/mcp-connect
USER mcp-connect
WORKDIR /var/lib/mcp-connect
EXPOSE 8080
ENTRYPOINT ["mcp-connect"]
CMD ["serve"]
