-- Makes an existing publication publish every kind of change capture reads. Re-runnable without harm.
ALTER PUBLICATION {publication} SET ({options});
