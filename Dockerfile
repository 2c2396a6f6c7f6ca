# gradstep: slim Python, CPU-only torch pinned before the project (as in the Makefile).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

# Pass the index of PyTorch's CPU wheels as TORCH_INDEX_URL to keep the image
# small; without it pip takes torch from the default index (a CUDA build).
ARG TORCH_INDEX_URL=
RUN apt-get update && apt-get install -y --no-install-recommends libseccomp2 && rm -rf /var/lib/apt/lists/*
RUN pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch==2.13.0 \
 && pip install numpy

COPY pyproject.toml README.md ./
COPY server ./server
COPY snippets ./snippets
COPY frontend ./frontend
RUN pip install .

RUN useradd --create-home --uid 10001 gradstep
USER gradstep
EXPOSE 8000
CMD ["gradstep", "serve", "--host", "0.0.0.0", "--port", "8000"]
