-- Params sent as text that is written as a number (every param an MLflow client logs: "0.01",
-- "1e-3") get the number run search compares (`params.lr > 0.001`), as typed params have. The
-- rule is the server's own (ParamValue::search_number): JSON's number syntax, at most 40
-- characters, finite below 1e308. Type and text stay as they were sent.
UPDATE params SET num = CAST(value AS REAL)
WHERE type = 'str' AND num IS NULL AND length(value) BETWEEN 1 AND 40 AND value = trim(value)
  AND substr(value, 1, 1) IN ('-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9')
  AND json_valid(value) AND json_type(value) IN ('integer', 'real')
  AND abs(CAST(value AS REAL)) < 1e308;
