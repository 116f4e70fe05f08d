FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY registry ./registry
COPY api ./api
COPY workers ./workers
COPY migrations ./migrations
COPY policies ./policies
RUN pip install --no-cache-dir . && useradd --system --uid 10001 modelreg
USER modelreg
EXPOSE 8080
CMD ["modelreg", "serve", "--host", "0.0.0.0"]
