"""The dispatcher: takes requests from the tier topics within a shared concurrency budget, calls the
LLM backend and writes each outcome to the reply topic before committing its offset."""
